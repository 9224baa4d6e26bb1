// Command franzsized produces the suite's sized test records with franz-go (pkg/kgo) at
// its default settings, or with the few changes its flags name, and prints one JSON
// summary on stdout.
//
// Usage:
//
//	franzsized -brokers HOST:PORT -topic T -count N -value-bytes B
//	           [-plain] [-compression default|none|gzip|snappy|lz4|zstd]
//	           [-txn-id ID -per-txn M [-abort I,J,...]] [-timeout 120s] [-log warn]
//
// Records 0..N-1 are produced in order, keyed, all of them handed to the client before
// one flush (per transaction), so the client's buffers fill and its produce requests
// carry as much as its batch limits allow. The producer is franz-go's default, idempotent
// with acks=all; -plain disables idempotence (acks=all still). With -txn-id the records
// go in transactions of -per-txn records: a transaction whose index (from 0) is listed in
// -abort is flushed, so its records are in the log, then aborted; the others commit.
//
// The sized test records are the ones tests/python/support.py defines (sized_record),
// byte for byte:
//
//	key     "key-%08d"
//	value   B bytes: "seq=%010d;", then B-15 filler bytes, the first (B-15)/2 from a
//	        32-bit LCG (x = seq*2654435761 + 1; per byte x = x*1103515245 + 12345,
//	        byte (x >> 16) & 0xFF), the rest byte j = (seq*31 + j*7) mod 256
//	headers seq=<decimal seq>
//
// Summary: {"acked":A,"failed":F,"errors":[...],"committed":C,"aborted":X,"seconds":S}.
// Exit status: 0 when every record was acknowledged and every transaction ended as asked,
// 1 otherwise, 2 on bad flags.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const valuePrefixBytes = 15

type summary struct {
	Acked     int      `json:"acked"`
	Failed    int      `json:"failed"`
	Errors    []string `json:"errors"`
	Committed int      `json:"committed"`
	Aborted   int      `json:"aborted"`
	Seconds   float64  `json:"seconds"`
	mu        sync.Mutex
}

func (s *summary) addError(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.Errors) < 20 {
		s.Errors = append(s.Errors, fmt.Sprintf(format, args...))
	}
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap broker, HOST:PORT")
	topic := flag.String("topic", "", "topic to produce to")
	count := flag.Int("count", 1000, "records to produce")
	valueBytes := flag.Int("value-bytes", 1000, "bytes of each value (at least 15)")
	plain := flag.Bool("plain", false, "disable idempotence (acks=all stays)")
	compression := flag.String("compression", "default", "default (franz-go's: snappy), none, gzip, snappy, lz4 or zstd")
	txnID := flag.String("txn-id", "", "transactional id (empty: no transactions)")
	perTxn := flag.Int("per-txn", 0, "records per transaction (0: all in one)")
	abort := flag.String("abort", "", "indexes of the transactions to abort, comma separated")
	timeout := flag.Duration("timeout", 120*time.Second, "deadline for the whole run")
	logLevel := flag.String("log", "warn", "franz-go's log level on stderr: warn, info or debug")
	flag.Parse()
	if *brokers == "" || *topic == "" || *count < 0 || *valueBytes < valuePrefixBytes {
		flag.Usage()
		os.Exit(2)
	}
	aborted := map[int]bool{}
	for _, index := range strings.Split(*abort, ",") {
		if strings.TrimSpace(index) == "" {
			continue
		}
		i, err := strconv.Atoi(strings.TrimSpace(index))
		if err != nil {
			fmt.Fprintln(os.Stderr, "franzsized: bad -abort:", err)
			os.Exit(2)
		}
		aborted[i] = true
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(*brokers),
		kgo.DefaultProduceTopic(*topic),
	}
	level, ok := map[string]kgo.LogLevel{
		"warn": kgo.LogLevelWarn, "info": kgo.LogLevelInfo, "debug": kgo.LogLevelDebug,
	}[*logLevel]
	if !ok {
		fmt.Fprintln(os.Stderr, "franzsized: unknown -log", *logLevel)
		os.Exit(2)
	}
	opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, func() string {
		return time.Now().Format("15:04:05.000 ")
	})))
	if *plain {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	if *compression != "default" {
		codec, ok := map[string]kgo.CompressionCodec{
			"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
			"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(),
			"zstd": kgo.ZstdCompression(),
		}[*compression]
		if !ok {
			fmt.Fprintln(os.Stderr, "franzsized: unknown -compression", *compression)
			os.Exit(2)
		}
		opts = append(opts, kgo.ProducerBatchCompression(codec))
	}
	if *txnID != "" {
		opts = append(opts, kgo.TransactionalID(*txnID))
	}
	if *perTxn <= 0 {
		*perTxn = max(*count, 1)
	}

	s := &summary{Errors: []string{}}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, opts, s, *count, *valueBytes, *txnID != "", *perTxn, aborted); err != nil {
		s.addError("%v", err)
	}
	s.Seconds = time.Since(started).Seconds()
	out, _ := json.Marshal(s)
	os.Stdout.Write(append(out, '\n'))
	if len(s.Errors) > 0 || s.Failed > 0 || s.Acked != *count {
		os.Exit(1)
	}
}

func run(ctx context.Context, opts []kgo.Opt, s *summary, count, valueBytes int,
	transactional bool, perTxn int, aborted map[int]bool) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for first, index := 0, 0; first < count; first, index = first+perTxn, index+1 {
		if transactional {
			if err := cl.BeginTransaction(); err != nil {
				return fmt.Errorf("begin transaction %d: %w", index, err)
			}
		}
		for seq := first; seq < min(count, first+perTxn); seq++ {
			cl.Produce(ctx, sizedRecord(seq, valueBytes), func(_ *kgo.Record, err error) {
				s.mu.Lock()
				defer s.mu.Unlock()
				if err != nil {
					s.Failed++
					if len(s.Errors) < 20 {
						s.Errors = append(s.Errors, fmt.Sprintf("produce seq %d: %v", seq, err))
					}
					return
				}
				s.Acked++
			})
		}
		// Every record of the transaction is acknowledged (in the log) before it ends,
		// also when it is aborted.
		if err := cl.Flush(ctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		if !transactional {
			continue
		}
		commit := kgo.TryCommit
		if aborted[index] {
			commit = kgo.TryAbort
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			return fmt.Errorf("end transaction %d (commit %v): %w", index, commit, err)
		}
		if aborted[index] {
			s.Aborted++
		} else {
			s.Committed++
		}
	}
	return nil
}

func sizedRecord(seq, valueBytes int) *kgo.Record {
	value := make([]byte, 0, valueBytes)
	value = append(value, fmt.Sprintf("seq=%010d;", seq)...)
	filler := valueBytes - valuePrefixBytes
	random := filler / 2
	x := uint32(seq)*2654435761 + 1
	for j := 0; j < filler; j++ {
		if j < random {
			x = x*1103515245 + 12345
			value = append(value, byte(x>>16))
		} else {
			value = append(value, byte((seq*31+j*7)%256))
		}
	}
	return &kgo.Record{
		Key:     []byte(fmt.Sprintf("key-%08d", seq)),
		Value:   value,
		Headers: []kgo.RecordHeader{{Key: "seq", Value: []byte(strconv.Itoa(seq))}},
	}
}
