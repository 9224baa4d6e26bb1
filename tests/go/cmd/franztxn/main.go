// Command franztxn runs franz-go's exactly-once consume-transform-produce loop, a
// GroupTransactSession at the client's default settings: it reads -input in consumer
// group -group with read_committed, writes "copy:" + value for each record to -output
// with the same key, and commits the group's offsets in the same transaction.
//
// Usage:
//
//	franztxn -brokers HOST:PORT -input T -output T -group G -txn-id ID [-idle-exit 0]
//
// It runs until no record arrived for -idle-exit (0: never), or until killed, and prints
// one JSON line per event:
//
//	{"event":"committed","records":N,"total":N}   a transaction committed
//	{"event":"retried","records":N}               End did not commit (a rebalance or a
//	                                              failed produce); the records come again
//	{"event":"error","error":"..."}               and exit status 1
package main

import (
	"context"
	"flag"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"headway/tests/go/internal/events"
)

func main() {
	brokers := flag.String("brokers", "", "seed brokers, comma separated")
	input := flag.String("input", "", "topic to read")
	output := flag.String("output", "", "topic to write")
	group := flag.String("group", "", "consumer group")
	txnID := flag.String("txn-id", "", "transactional id")
	idleExit := flag.Duration("idle-exit", 0, "exit after this long without records (0: never)")
	flag.Parse()
	if *brokers == "" || *input == "" || *output == "" || *group == "" || *txnID == "" {
		flag.Usage()
		os.Exit(2)
	}
	session, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.TransactionalID(*txnID),
		kgo.DefaultProduceTopic(*output),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*input),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
	)
	if err != nil {
		events.Fail(err)
	}
	defer session.Close()
	ctx := context.Background()
	total := 0
	lastRecord := time.Now()
	for *idleExit == 0 || time.Since(lastRecord) < *idleExit {
		pollCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := session.PollFetches(pollCtx)
		cancel()
		if fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if err != context.DeadlineExceeded {
				events.Fail(err)
			}
		})
		if fetches.NumRecords() == 0 {
			continue
		}
		lastRecord = time.Now()
		if err := session.Begin(); err != nil {
			events.Fail(err)
		}
		records := 0
		fetches.EachRecord(func(r *kgo.Record) {
			records++
			copied := &kgo.Record{Key: r.Key, Value: append([]byte("copy:"), r.Value...)}
			session.Produce(ctx, copied, func(_ *kgo.Record, err error) {
				if err != nil {
					events.Emit(map[string]any{"event": "produce_failed", "error": err.Error()})
				}
			})
		})
		committed, err := session.End(ctx, kgo.TryCommit)
		if err != nil {
			events.Fail(err)
		}
		if committed {
			total += records
			events.Emit(map[string]any{"event": "committed", "records": records, "total": total})
		} else {
			events.Emit(map[string]any{"event": "retried", "records": records})
		}
	}
}
