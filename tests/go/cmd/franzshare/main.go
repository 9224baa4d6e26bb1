// Command franzshare reads a topic in a share group with franz-go (pkg/kgo, KIP-932) at
// the client's default settings, accepts each poll's records and waits until the broker
// answered those acknowledgements before it polls again. It prints one JSON line per
// event, in the shape tests/java/share/ShareConsumerCheck.java prints them:
//
//	{"event":"started"}
//	{"event":"record","consumer":0,"partition":P,"offset":O,"value":"...","delivery":N}
//	{"event":"acknowledged","consumer":0,"records":N,"error":null}   the broker took a poll's acks
//	{"event":"fetch_error","consumer":0,"error":"..."}               an error a poll reported
//	{"event":"closed"}                                               stdin closed, group left
//	{"event":"error","error":"..."}                                  and exit status 1
//
// Usage:
//
//	franzshare -brokers HOST:PORT[,...] -topic T -group G
//
// It runs until its standard input is closed (or it is killed).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"headway/tests/go/internal/events"
)

// ackWait bounds one wait for a poll's acknowledgements to be answered; franz-go retries
// them inside it (a leader that moved, a connection that broke).
const ackWait = 60 * time.Second

func main() {
	brokers := flag.String("brokers", "", "seed brokers, comma separated")
	topic := flag.String("topic", "", "topic to read")
	group := flag.String("group", "", "share group")
	flag.Parse()
	if *brokers == "" || *topic == "" || *group == "" {
		flag.Usage()
		os.Exit(2)
	}
	// The broker's answers to acknowledgements since the last flush.
	var acked sync.Mutex
	var results kgo.ShareAckResults
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ShareGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.ShareAckCallback(func(_ *kgo.Client, r kgo.ShareAckResults) {
			acked.Lock()
			results = append(results, r...)
			acked.Unlock()
		}),
	)
	if err != nil {
		events.Fail(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	events.Emit(map[string]any{"event": "started"})
	for ctx.Err() == nil {
		pollCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := client.PollFetches(pollCtx)
		cancel()
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				events.Emit(map[string]any{"event": "fetch_error", "consumer": 0, "error": err.Error()})
			}
		})
		records := fetches.Records()
		if len(records) == 0 {
			continue
		}
		for _, r := range records {
			events.Emit(map[string]any{"event": "record", "consumer": 0, "partition": r.Partition,
				"offset": r.Offset, "value": string(r.Value), "delivery": r.DeliveryCount()})
		}
		client.MarkAcks(kgo.AckAccept)
		flushCtx, cancel := context.WithTimeout(context.Background(), ackWait)
		err := client.FlushAcks(flushCtx)
		cancel()
		acked.Lock()
		answered := results
		results = nil
		acked.Unlock()
		for _, r := range answered {
			if err == nil && r.Err != nil {
				err = fmt.Errorf("%s-%d: %w", r.Topic, r.Partition, r.Err)
			}
		}
		var reported any
		if err != nil {
			reported = err.Error()
		}
		events.Emit(map[string]any{"event": "acknowledged", "consumer": 0, "records": len(records),
			"error": reported})
	}
	client.Close()
	events.Emit(map[string]any{"event": "closed"})
}
