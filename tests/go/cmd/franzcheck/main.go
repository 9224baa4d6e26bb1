// Command franzcheck checks a Kafka-compatible broker with franz-go (pkg/kgo), the Go
// client, at its default settings: it produces records, reads them back with a consumer
// group, commits, and prints one JSON summary on stdout.
//
// Usage:
//
//	franzcheck -brokers HOST:PORT[,...] -topic T [-group G] -from F -count N [-timeout 120s]
//
// Without -group the consumer is a direct one (no group, every partition, no commits),
// for brokers whose group coordinators are not shared, such as a headway cluster's.
//
// Steps, each with its own client:
//
//  1. Produce the test records F..F+N-1 (keyed) to T. franz-go's defaults apply: an
//     idempotent producer with acks=all, the sticky key partitioner, its own batching.
//  2. List the topic's start and end offsets and the group's committed offsets.
//  3. Consume T in group G (kgo.ConsumerGroup, classic protocol, auto-commit disabled so
//     the commit happens exactly once, at the end) until every partition's position has
//     reached the end offset listed in step 2, then commit and leave the group.
//  4. Fetch the group's committed offsets again.
//
// Without a group, steps 2 and 4 list no committed offsets, step 3 reads every partition
// from its start offset with a direct consumer and commits nothing.
//
// A partition with no committed offset is read from its start offset, so a group that
// already consumed F records reads only the new ones: anything outside F..F+N-1 is
// reported as unexpected, anything read twice as a duplicate.
//
// The test records are the ones tests/python/support.py defines, byte for byte, so the
// Python suite can check what franz-go wrote and franz-go can check every record it
// reads:
//
//	key     "key-%08d"
//	value   "seq=%010d;" then 80 bytes, byte j = (seq*31 + j*7) mod 256
//	headers seq=<decimal seq>, bin=[seq%256, 0x00, 0xFF, (seq>>8)%256], dup=a, dup=b, empty=""
//
// Exit status: 0 when the summary lists no error, 1 when it does, 2 on bad flags.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// valueFillerBytes is the length of the seq-dependent tail of every test value.
const valueFillerBytes = 80

// pollWait bounds one PollFetches call; the consume loop re-checks its end condition
// after each.
const pollWait = 200 * time.Millisecond

// errorsShownMax bounds the error list in the summary; the count is always exact.
const errorsShownMax = 50

type config struct {
	brokers string
	topic   string
	group   string
	from    int
	count   int
	timeout time.Duration
}

// position is a record's place in the topic.
type position struct {
	partition int32
	offset    int64
}

// partitionSummary describes what one step saw of one partition.
type partitionSummary struct {
	Count       int   `json:"count"`
	FirstOffset int64 `json:"first_offset"`
	LastOffset  int64 `json:"last_offset"`
}

type summary struct {
	Topic              string                      `json:"topic"`
	Group              string                      `json:"group"`
	From               int                         `json:"from"`
	Count              int                         `json:"count"`
	Produced           int                         `json:"produced"`
	ProducedPartitions map[int32]*partitionSummary `json:"produced_partitions"`
	ProducerID         int64                       `json:"producer_id"`
	ProducerEpoch      int16                       `json:"producer_epoch"`
	StartOffsets       map[int32]int64             `json:"start_offsets"`
	EndOffsets         map[int32]int64             `json:"end_offsets"`
	CommittedBefore    map[int32]int64             `json:"committed_before"`
	Consumed           int                         `json:"consumed"`
	ConsumedPartitions map[int32]*partitionSummary `json:"consumed_partitions"`
	Duplicates         int                         `json:"duplicates"`
	DuplicateOffsets   int                         `json:"duplicate_offsets"`
	Unexpected         int                         `json:"unexpected"`
	Missing            int                         `json:"missing"`
	Malformed          int                         `json:"malformed"`
	ProducedElsewhere  int                         `json:"produced_elsewhere"`
	CommittedAfter     map[int32]int64             `json:"committed_after"`
	ErrorCount         int                         `json:"error_count"`
	Errors             []string                    `json:"errors"`
	Seconds            map[string]float64          `json:"seconds"`
	produceErrors      map[string]int
	producedAt         map[int]position // seq -> where its acknowledgement put it
	mu                 sync.Mutex       // guards what the produce callbacks touch
}

func main() {
	cfg := parseFlags()
	s := &summary{
		Topic: cfg.topic, Group: cfg.group, From: cfg.from, Count: cfg.count,
		ProducedPartitions: map[int32]*partitionSummary{},
		ConsumedPartitions: map[int32]*partitionSummary{},
		Errors:             []string{},
		Seconds:            map[string]float64{},
		producedAt:         map[int]position{},
		produceErrors:      map[string]int{},
		ProducerID:         -1,
		ProducerEpoch:      -1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	run(ctx, cfg, s)

	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(s); err != nil {
		fmt.Fprintln(os.Stderr, "franzcheck: writing the summary:", err)
		os.Exit(1)
	}
	if s.ErrorCount > 0 {
		os.Exit(1)
	}
}

func parseFlags() config {
	var cfg config
	flag.StringVar(&cfg.brokers, "brokers", "127.0.0.1:9092", "bootstrap brokers, HOST:PORT[,HOST:PORT...]")
	flag.StringVar(&cfg.topic, "topic", "", "topic to produce to and consume from")
	flag.StringVar(&cfg.group, "group", "", "consumer group (none: a direct consumer)")
	flag.IntVar(&cfg.from, "from", 0, "first sequence number to produce")
	flag.IntVar(&cfg.count, "count", 1000, "records to produce (0: only consume)")
	flag.DurationVar(&cfg.timeout, "timeout", 120*time.Second, "deadline for the whole run")
	flag.Parse()
	if cfg.topic == "" || cfg.from < 0 || cfg.count < 0 {
		fmt.Fprintln(os.Stderr, "franzcheck: -topic is required; -from and -count must be >= 0")
		flag.Usage()
		os.Exit(2)
	}
	return cfg
}

func run(ctx context.Context, cfg config, s *summary) {
	step := func(name string, fn func() error) bool {
		started := time.Now()
		err := fn()
		s.Seconds[name] = time.Since(started).Seconds()
		if err != nil {
			s.addError("%s: %v", name, err)
			return false
		}
		return true
	}
	if !step("produce", func() error { return produce(ctx, cfg, s) }) {
		return
	}
	if !step("list_offsets", func() error { return listOffsets(ctx, cfg, s) }) {
		return
	}
	if !step("consume", func() error { return consume(ctx, cfg, s) }) {
		return
	}
	step("fetch_committed", func() error {
		committed, err := fetchCommitted(ctx, cfg)
		s.CommittedAfter = committed
		return err
	})
}

// newClient builds a client with franz-go's defaults plus `opts`; warnings and errors
// of the client go to stderr, where the Python test shows them with a failure.
func newClient(cfg config, opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(cfg.brokers, ",")...),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)),
	}
	return kgo.NewClient(append(base, opts...)...)
}

// -- step 1: produce --------------------------------------------------------------------

func produce(ctx context.Context, cfg config, s *summary) error {
	if cfg.count == 0 {
		return nil
	}
	cl, err := newClient(cfg, kgo.DefaultProduceTopic(cfg.topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	for seq := cfg.from; seq < cfg.from+cfg.count; seq++ {
		cl.Produce(ctx, makeRecord(seq), func(r *kgo.Record, err error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if err != nil {
				s.produceErrors[err.Error()]++
				if len(s.produceErrors) == 1 && s.produceErrors[err.Error()] == 1 {
					s.addError("produce seq %d: %v (the first failure)", seq, err)
				}
				return
			}
			s.Produced++
			s.ProducerID, s.ProducerEpoch = r.ProducerID, r.ProducerEpoch
			s.producedAt[seq] = position{r.Partition, r.Offset}
			note(s.ProducedPartitions, r.Partition, r.Offset)
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Produced != cfg.count {
		return fmt.Errorf("%d of %d records acknowledged; failures by error: %v",
			s.Produced, cfg.count, s.produceErrors)
	}
	return nil
}

func makeRecord(seq int) *kgo.Record {
	value := make([]byte, 0, 15+valueFillerBytes)
	value = append(value, fmt.Sprintf("seq=%010d;", seq)...)
	for j := 0; j < valueFillerBytes; j++ {
		value = append(value, byte((seq*31+j*7)%256))
	}
	return &kgo.Record{
		Key:   []byte(fmt.Sprintf("key-%08d", seq)),
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: "seq", Value: []byte(strconv.Itoa(seq))},
			{Key: "bin", Value: []byte{byte(seq % 256), 0x00, 0xFF, byte((seq >> 8) % 256)}},
			{Key: "dup", Value: []byte("a")},
			{Key: "dup", Value: []byte("b")},
			{Key: "empty", Value: []byte{}},
		},
	}
}

// seqOf returns the sequence number of a test record and checks it byte for byte.
func seqOf(r *kgo.Record) (int, error) {
	v := r.Value
	if len(v) < 15 || !bytes.HasPrefix(v, []byte("seq=")) || v[14] != ';' {
		return 0, fmt.Errorf("not a test record value: %q", v[:min(len(v), 40)])
	}
	seq, err := strconv.Atoi(string(v[4:14]))
	if err != nil {
		return 0, fmt.Errorf("not a test record value: %q", v[:15])
	}
	want := makeRecord(seq)
	if !bytes.Equal(r.Key, want.Key) || !bytes.Equal(r.Value, want.Value) {
		return seq, fmt.Errorf("seq %d: key or value differs from what was produced", seq)
	}
	if len(r.Headers) != len(want.Headers) {
		return seq, fmt.Errorf("seq %d: %d headers, want %d", seq, len(r.Headers), len(want.Headers))
	}
	for i, h := range r.Headers {
		if h.Key != want.Headers[i].Key || !bytes.Equal(h.Value, want.Headers[i].Value) {
			return seq, fmt.Errorf("seq %d: header %d is %q=%q", seq, i, h.Key, h.Value)
		}
	}
	return seq, nil
}

// -- step 2: offsets --------------------------------------------------------------------

func listOffsets(ctx context.Context, cfg config, s *summary) error {
	cl, err := newClient(cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, cfg.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, cfg.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("end offsets: %w", err)
	}
	s.StartOffsets, s.EndOffsets = map[int32]int64{}, map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) { s.StartOffsets[o.Partition] = o.Offset })
	ends.Each(func(o kadm.ListedOffset) { s.EndOffsets[o.Partition] = o.Offset })
	if len(s.EndOffsets) == 0 {
		return fmt.Errorf("topic %s has no partitions", cfg.topic)
	}
	s.CommittedBefore, err = fetchCommitted(ctx, cfg)
	return err
}

// fetchCommitted returns the group's committed offsets for the topic (OffsetFetch for
// all topics of the group); a partition without a commit is absent.
func fetchCommitted(ctx context.Context, cfg config) (map[int32]int64, error) {
	if cfg.group == "" {
		return map[int32]int64{}, nil
	}
	cl, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).FetchOffsets(ctx, cfg.group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("offset fetch for group %s: %w", cfg.group, err)
	}
	committed := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == cfg.topic && o.At >= 0 {
			committed[o.Partition] = o.At
		}
	})
	return committed, nil
}

// -- step 3: consume in a group -----------------------------------------------------------

func consume(ctx context.Context, cfg config, s *summary) error {
	// The member must be assigned every partition before the run can end, so even a run
	// with nothing new to read joins the group and starts from its committed offsets.
	var assignedMu sync.Mutex
	assigned := map[int32]bool{}
	opts := []kgo.Opt{
		kgo.ConsumeTopics(cfg.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if cfg.group == "" {
		// A direct consumer reads every partition of the topic.
		for p := range s.EndOffsets {
			assigned[p] = true
		}
	} else {
		opts = append(opts,
			kgo.ConsumerGroup(cfg.group),
			kgo.DisableAutoCommit(),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, got map[string][]int32) {
				assignedMu.Lock()
				defer assignedMu.Unlock()
				for _, p := range got[cfg.topic] {
					assigned[p] = true
				}
			}))
	}
	cl, err := newClient(cfg, opts...)
	if err != nil {
		return err
	}
	// Close leaves the group (if any); it runs after the commit below.
	defer cl.Close()

	// Where each partition's reading starts: the committed offset, else the log start.
	next := map[int32]int64{} // the next offset expected per partition
	for p, end := range s.EndOffsets {
		next[p] = s.StartOffsets[p]
		if c, ok := s.CommittedBefore[p]; ok {
			next[p] = c
		}
		if next[p] > end {
			return fmt.Errorf("partition %d: committed offset %d past the end offset %d", p, next[p], end)
		}
	}
	reached := func() bool {
		assignedMu.Lock()
		defer assignedMu.Unlock()
		for p, end := range s.EndOffsets {
			if !assigned[p] || next[p] < end {
				return false
			}
		}
		return true
	}
	t := tally{cfg: cfg, s: s, seqCount: map[int]int{}, offsetCount: map[position]int{}}
	for !reached() {
		// A short poll, so that an assignment with nothing to read is noticed too.
		pollCtx, cancelPoll := context.WithTimeout(ctx, pollWait)
		fetches := cl.PollFetches(pollCtx)
		cancelPoll()
		if ctx.Err() != nil {
			assignedMu.Lock()
			defer assignedMu.Unlock()
			return fmt.Errorf("deadline: assigned %v, next offsets %v, end offsets %v, %d records read",
				assigned, next, s.EndOffsets, s.Consumed)
		}
		if errors.Is(fetches.Err0(), context.DeadlineExceeded) {
			continue // pollCtx expired: nothing arrived in pollWait
		}
		for _, fe := range fetches.Errors() {
			s.addError("fetch %s[%d]: %v", fe.Topic, fe.Partition, fe.Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
			t.record(r)
		})
	}
	t.finish()
	if cfg.group == "" {
		return nil
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// tally checks each record a consumer reads and counts what it has seen.
type tally struct {
	cfg         config
	s           *summary
	seqCount    map[int]int
	offsetCount map[position]int
}

func (t *tally) record(r *kgo.Record) {
	s, at := t.s, position{r.Partition, r.Offset}
	s.Consumed++
	note(s.ConsumedPartitions, r.Partition, r.Offset)
	t.offsetCount[at]++
	seq, err := seqOf(r)
	if err != nil {
		s.Malformed++
		s.addError("partition %d offset %d: %v", r.Partition, r.Offset, err)
		return
	}
	t.seqCount[seq]++
	if seq < t.cfg.from || seq >= t.cfg.from+t.cfg.count {
		s.Unexpected++
		s.addError("partition %d offset %d: seq %d is not one of this run's %d records from seq %d"+
			" (already consumed by the group?)", r.Partition, r.Offset, seq, t.cfg.count, t.cfg.from)
		return
	}
	if acked, ok := s.producedAt[seq]; ok && acked != at {
		s.ProducedElsewhere++
		s.addError("seq %d read at partition %d offset %d, acknowledged at partition %d offset %d",
			seq, r.Partition, r.Offset, acked.partition, acked.offset)
	}
}

// finish counts the records never read and those read more than once.
func (t *tally) finish() {
	s := t.s
	for _, n := range t.offsetCount {
		if n > 1 {
			s.DuplicateOffsets += n - 1
		}
	}
	for seq := t.cfg.from; seq < t.cfg.from+t.cfg.count; seq++ {
		switch n := t.seqCount[seq]; {
		case n == 0:
			s.Missing++
		case n > 1:
			s.Duplicates += n - 1
		}
	}
	if s.Missing > 0 || s.Duplicates > 0 || s.DuplicateOffsets > 0 {
		s.addError("%d records missing, %d duplicated, %d offsets delivered twice",
			s.Missing, s.Duplicates, s.DuplicateOffsets)
	}
}

// -- summary helpers ----------------------------------------------------------------------

func note(parts map[int32]*partitionSummary, partition int32, offset int64) {
	ps := parts[partition]
	if ps == nil {
		ps = &partitionSummary{FirstOffset: offset, LastOffset: offset}
		parts[partition] = ps
	}
	ps.Count++
	ps.FirstOffset = min(ps.FirstOffset, offset)
	ps.LastOffset = max(ps.LastOffset, offset)
}

func (s *summary) addError(format string, args ...any) {
	s.ErrorCount++
	if len(s.Errors) < errorsShownMax {
		s.Errors = append(s.Errors, fmt.Sprintf(format, args...))
	}
}
