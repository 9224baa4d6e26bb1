// Command nats-slow-consumer runs the lab's slow-consumer and stuck-consumer scenarios
// (seed 001) against a NATS server with core publish/subscribe, and writes a report in the
// same JSON shape as `headway bench slow-consumer` / `stuck-consumer`
// (crates/bench/src/report.rs), so that bench/plot.py can put the brokers side by side.
//
// -scenario slow-consumer (the default): two runs of equal length, a publisher at -rate
// messages per second of -size bytes and -fast subscribers; then the same plus one slow
// subscriber that connects through the delay proxy (`headway bench proxy`, address in
// -slow-url).
//
// -scenario stuck-consumer: two runs of equal length, a publisher (25,000 msg/s of 1 KiB by
// default) and -fast subscribers; then the same plus -stuck subscribers that subscribe over
// a raw connection with a small receive buffer and never read it (stuck.go). By default a
// run lasts long enough to publish 1 GiB. The report says whether, and when, the server
// disconnected them, and the server's peak resident memory in each run.
//
// The first 8 bytes of every message are its send time in microseconds since the epoch; a
// subscriber's end-to-end latency is its receive time minus that. Core NATS has no
// acknowledgement, so publish latency is not measured, and it has no replay, so there is
// no catch-up subscriber.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

type latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

type rate struct {
	Messages uint64  `json:"messages"`
	Bytes    uint64  `json:"bytes"`
	MsgsPerS float64 `json:"msgs_per_s"`
	MBPerS   float64 `json:"mb_per_s"`
}

type consumerReport struct {
	Name    string  `json:"name"`
	Role    string  `json:"role"`
	Consume rate    `json:"consume"`
	E2E     latency `json:"e2e_latency_ms"`
	LagEnd  *uint64 `json:"lag_end"`
}

type seriesPoint struct {
	T           uint64  `json:"t"`
	PublishRate float64 `json:"publish_msgs_per_s"`
	ConsumeRate float64 `json:"consume_msgs_per_s"`
	Backlog     uint64  `json:"backlog"`
	PublishP50  float64 `json:"publish_p50_ms"`
	PublishP99  float64 `json:"publish_p99_ms"`
	E2EP50      float64 `json:"e2e_p50_ms"`
	E2EP99      float64 `json:"e2e_p99_ms"`
	E2EMax      float64 `json:"e2e_max_ms"`
}

type runReport struct {
	Name           string             `json:"name"`
	Params         map[string]any     `json:"params"`
	DurationS      float64            `json:"duration_s"`
	Publish        rate               `json:"publish"`
	PublishErrors  uint64             `json:"publish_errors"`
	Consume        rate               `json:"consume"`
	PublishLatency latency            `json:"publish_latency_ms"`
	E2E            latency            `json:"e2e_latency_ms"`
	Backlog        map[string]uint64  `json:"backlog"`
	Consumers      []consumerReport   `json:"consumers"`
	Fairness       map[string]float64 `json:"fairness"`
	Series         []seriesPoint      `json:"series"`
	RSSMax         *float64           `json:"broker_rss_mib_max"`
	Extra          map[string]any     `json:"extra"`
}

type report struct {
	Format    int            `json:"format"`
	Scenario  string         `json:"scenario"`
	Label     string         `json:"label"`
	Bootstrap string         `json:"bootstrap"`
	Command   string         `json:"command"`
	Cores     int            `json:"cores"`
	StartedAt string         `json:"started_at"`
	DurationS float64        `json:"duration_s"`
	Quick     bool           `json:"quick"`
	Notes     []string       `json:"notes"`
	Runs      []runReport    `json:"runs"`
	Summary   map[string]any `json:"summary"`
}

// subscriber collects one subscriber's latencies (µs) and when each arrived.
type subscriber struct {
	name, role string
	mu         sync.Mutex
	latencies  []int64
	arrivals   []int64 // µs since the epoch
	bytes      uint64
	count      atomic.Uint64
}

func nowMicros() int64 { return time.Now().UnixMicro() }

func (s *subscriber) handle() nats.MsgHandler {
	return func(m *nats.Msg) {
		if len(m.Data) < 8 {
			return
		}
		stamp := int64(binary.BigEndian.Uint64(m.Data[:8]))
		now := nowMicros()
		s.mu.Lock()
		s.latencies = append(s.latencies, now-stamp)
		s.arrivals = append(s.arrivals, now)
		s.bytes += uint64(len(m.Data))
		s.mu.Unlock()
		s.count.Add(1)
	}
}

func summarize(us []int64) latency {
	if len(us) == 0 {
		return latency{}
	}
	sorted := append([]int64(nil), us...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(sorted)))) - 1
		if i < 0 {
			i = 0
		}
		return float64(sorted[i]) / 1000
	}
	var sum float64
	for _, v := range sorted {
		sum += float64(v)
	}
	return latency{
		Count: uint64(len(sorted)), Mean: sum / float64(len(sorted)) / 1000,
		P50: at(0.5), P90: at(0.9), P99: at(0.99), P999: at(0.999),
		Max: float64(sorted[len(sorted)-1]) / 1000,
	}
}

func rateOf(messages, bytes uint64, seconds float64) rate {
	return rate{messages, bytes, float64(messages) / seconds, float64(bytes) / 1e6 / seconds}
}

func rssMiB(pid int) *float64 {
	if pid <= 0 {
		return nil
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				v := kb / 1024
				return &v
			}
		}
	}
	return nil
}

// rssSampler reads the server's resident memory every second until stopped.
type rssSampler struct {
	pid  int
	mu   sync.Mutex
	max  *float64
	last *float64
	stop chan struct{}
	once sync.Once
	done sync.WaitGroup
}

func startRSS(pid int) *rssSampler {
	r := &rssSampler{pid: pid, stop: make(chan struct{})}
	if pid <= 0 {
		return r
	}
	r.sample()
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				r.sample()
			}
		}
	}()
	return r
}

func (r *rssSampler) sample() {
	v := rssMiB(r.pid)
	if v == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = v
	if r.max == nil || *v > *r.max {
		m := *v
		r.max = &m
	}
}

func (r *rssSampler) current() (last, max *float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.max
}

// finish takes a last sample, stops the sampler and returns the highest value seen.
func (r *rssSampler) finish() *float64 {
	r.once.Do(func() {
		if r.pid > 0 {
			r.sample()
		}
		close(r.stop)
		r.done.Wait()
	})
	_, max := r.current()
	return max
}

type options struct {
	scenario                                   string
	url, slowURL, subject, out, label, command string
	rate                                       float64
	size, fast, stuck, pid                     int
	perRun                                     time.Duration
	delayMs                                    int
	quick                                      bool
	warmup                                     time.Duration
	rssLimitMiB                                float64
}

// runSpec is one run of a scenario: the fast subscribers, plus a slow one or stuck ones.
type runSpec struct {
	name  string
	slow  bool
	stuck int
}

func runOnce(o options, spec runSpec) (runReport, error) {
	name := spec.name
	withSlow := spec.slow
	var subs []*subscriber
	var conns []*nats.Conn
	var disconnects, asyncErrors atomic.Uint64
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	connect := func(url, who string) (*nats.Conn, error) {
		c, err := nats.Connect(url, nats.Name(who),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					disconnects.Add(1)
					fmt.Fprintf(os.Stderr, "[nats] %s disconnected: %v\n", who, err)
				}
			}),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				asyncErrors.Add(1)
				fmt.Fprintf(os.Stderr, "[nats] %s: %v\n", who, err)
			}))
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	for i := 0; i < o.fast; i++ {
		subs = append(subs, &subscriber{name: fmt.Sprintf("fast-%d", i), role: "fast"})
	}
	if withSlow {
		subs = append(subs, &subscriber{name: "slow", role: "slow"})
	}
	for _, s := range subs {
		url := o.url
		if s.role == "slow" {
			url = o.slowURL
		}
		c, err := connect(url, s.name)
		if err != nil {
			return runReport{}, fmt.Errorf("%s: %w", s.name, err)
		}
		if _, err := c.Subscribe(o.subject, s.handle()); err != nil {
			return runReport{}, err
		}
		if err := c.Flush(); err != nil {
			return runReport{}, err
		}
	}
	var stuck []*stuckClient
	defer func() {
		for _, s := range stuck {
			_ = s.conn.Close()
		}
	}()
	if spec.stuck > 0 {
		addr, err := natsAddr(o.url)
		if err != nil {
			return runReport{}, err
		}
		for i := 0; i < spec.stuck; i++ {
			s, err := dialStuck(fmt.Sprintf("stuck-%d", i), addr, o.subject, i+1)
			if err != nil {
				return runReport{}, err
			}
			stuck = append(stuck, s)
		}
	}
	var consumers []consumerReport
	pub, err := connect(o.url, "publisher")
	if err != nil {
		return runReport{}, err
	}
	// The run's clock starts with the load, as in the Rust scenarios.
	start := time.Now()
	rss := startRSS(o.pid)
	defer rss.finish()
	stopStuck := make(chan struct{})
	var stuckDone sync.WaitGroup
	for _, s := range stuck {
		stuckDone.Add(1)
		go s.watch(start, stopStuck, &stuckDone)
	}
	// Every goroutine of the run ends with it, whichever way runOnce returns.
	var stuckOnce sync.Once
	endStuck := func() {
		stuckOnce.Do(func() {
			close(stopStuck)
			stuckDone.Wait()
		})
	}
	defer endStuck()
	// The guard: should the server's memory pass -rss-limit-mib, the stuck clients are
	// closed (by us, not counted as closed by the server) so the machine survives.
	var rssLimitHit atomic.Bool
	var rssLimitAt atomic.Int64 // µs after start
	stopGuard := make(chan struct{})
	var guardDone sync.WaitGroup
	if o.pid > 0 && len(stuck) > 0 && o.rssLimitMiB > 0 {
		guardDone.Add(1)
		go func() {
			defer guardDone.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stopGuard:
					return
				case <-t.C:
					// Sampled through the run's sampler, so these count toward its maximum.
					rss.sample()
					if v, _ := rss.current(); v != nil && *v > o.rssLimitMiB {
						rssLimitAt.Store(time.Since(start).Microseconds())
						rssLimitHit.Store(true)
						fmt.Fprintf(os.Stderr, "[%s] server rss %.0f MiB passed -rss-limit-mib %.0f: closing the stuck clients\n",
							o.scenario, *v, o.rssLimitMiB)
						endStuck()
						for _, s := range stuck {
							_ = s.conn.Close()
						}
						return
					}
				}
			}
		}()
	}
	endGuard := func() {
		select {
		case <-stopGuard:
		default:
			close(stopGuard)
		}
		guardDone.Wait()
	}
	defer endGuard()
	stuckGone := func() int {
		n := 0
		for _, s := range stuck {
			s.mu.Lock()
			if s.disconnected {
				n++
			}
			s.mu.Unlock()
		}
		return n
	}
	payload := make([]byte, o.size)
	for i := 8; i < len(payload); i++ {
		payload[i] = byte('a' + i%23)
	}
	var published, errors uint64
	perSecond := []uint64{}
	deadline := start.Add(o.perRun)
	lastPrint := start
	for time.Now().Before(deadline) {
		due := start.Add(time.Duration(float64(published) / o.rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
			continue
		}
		binary.BigEndian.PutUint64(payload[:8], uint64(nowMicros()))
		if err := pub.Publish(o.subject, payload); err != nil {
			errors++
		} else {
			published++
			sec := int(time.Since(start).Seconds())
			for len(perSecond) <= sec {
				perSecond = append(perSecond, 0)
			}
			perSecond[sec]++
		}
		if time.Since(lastPrint) >= time.Second {
			lastPrint = time.Now()
			line := fmt.Sprintf("[%s] %s %4.0fs  publish %d messages  fast-0 read %d",
				o.scenario, name, time.Since(start).Seconds(), published, subs[0].count.Load())
			if len(stuck) > 0 {
				line += fmt.Sprintf("  stuck closed by the server %d/%d", stuckGone(), len(stuck))
			}
			if last, _ := rss.current(); last != nil {
				line += fmt.Sprintf("  server rss %.0f MiB", *last)
			}
			fmt.Fprintln(os.Stderr, line)
		}
	}
	loadSeconds := time.Since(start).Seconds()
	_ = pub.Flush()
	// Drain: fast subscribers get up to 5 s to receive what was published.
	drainUntil := time.Now().Add(5 * time.Second)
	for time.Now().Before(drainUntil) {
		done := true
		for _, s := range subs {
			if s.role == "fast" && s.count.Load() < published {
				done = false
			}
		}
		if done {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The stuck subscribers stay connected (and unread) through the drain.
	endGuard()
	endStuck()
	rssMax := rss.finish()
	var stuckReports []map[string]any
	for _, s := range stuck {
		stuckReports = append(stuckReports, s.report(start))
	}
	var all []int64
	var fastRates, fastP99 []float64
	var consumed, consumedBytes uint64
	backlogEnd := uint64(0)
	series := make([]seriesPoint, len(perSecond))
	for t := range series {
		series[t].T = uint64(t)
		series[t].PublishRate = float64(perSecond[t])
	}
	perSecondLat := make([][]int64, len(series))
	for _, s := range subs {
		s.mu.Lock()
		lat := append([]int64(nil), s.latencies...)
		arrivals := append([]int64(nil), s.arrivals...)
		bytes := s.bytes
		s.mu.Unlock()
		// Latencies of the warm-up stay out of the percentiles (the series keeps them).
		var counted []int64
		for i, a := range arrivals {
			if a >= start.Add(o.warmup).UnixMicro() {
				counted = append(counted, lat[i])
			}
		}
		n := uint64(len(lat))
		lag := uint64(0)
		if published > n {
			lag = published - n
		}
		c := consumerReport{Name: s.name, Role: s.role, Consume: rateOf(n, bytes, loadSeconds), E2E: summarize(counted), LagEnd: &lag}
		consumers = append(consumers, c)
		if s.role == "fast" {
			all = append(all, counted...)
			consumed += n
			consumedBytes += bytes
			fastRates = append(fastRates, c.Consume.MsgsPerS)
			fastP99 = append(fastP99, c.E2E.P99)
			if lag > backlogEnd {
				backlogEnd = lag
			}
			for i, a := range arrivals {
				sec := int((a - start.UnixMicro()) / 1e6)
				if sec >= 0 && sec < len(perSecondLat) {
					perSecondLat[sec] = append(perSecondLat[sec], lat[i])
					series[sec].ConsumeRate++
				}
			}
		}
	}
	for t := range series {
		l := summarize(perSecondLat[t])
		series[t].E2EP50, series[t].E2EP99, series[t].E2EMax = l.P50, l.P99, l.Max
	}
	jain, sum, squares := 0.0, 0.0, 0.0
	for _, r := range fastRates {
		sum += r
		squares += r * r
	}
	if squares > 0 {
		jain = sum * sum / (float64(len(fastRates)) * squares)
	}
	minP, maxP := math.Inf(1), 0.0
	for _, p := range fastP99 {
		minP, maxP = math.Min(minP, p), math.Max(maxP, p)
	}
	spread := 0.0
	if minP > 0 && !math.IsInf(minP, 1) {
		spread = maxP / minP
	}
	params := map[string]any{"with_slow": withSlow, "fast": o.fast, "rate": o.rate, "size": o.size,
		"delay_ms": o.delayMs, "catch_up": false}
	extra := map[string]any{"disconnects": disconnects.Load(), "async_errors": asyncErrors.Load()}
	if o.scenario == "stuck-consumer" {
		params = map[string]any{"with_stuck": spec.stuck > 0, "stuck": spec.stuck, "fast": o.fast, "rate": o.rate,
			"size": o.size, "messages": uint64(math.Round(o.rate * o.perRun.Seconds())), "stuck_rcvbuf": stuckRcvBuf}
		extra["stuck"] = stuckReports
		extra["stuck_closed_by_broker"] = stuckGone()
		extra["rss_limit_hit_at_s"] = nil
		if rssLimitHit.Load() {
			extra["rss_limit_hit_at_s"] = float64(rssLimitAt.Load()) / 1e6
		}
		// The publisher keeps to its schedule and catches up after a stall, so the run's
		// average rate hides a stall; the slowest whole second shows it.
		minRate, slowSeconds := -1.0, 0
		for t, n := range perSecond {
			if float64(t+1) > loadSeconds {
				break
			}
			if minRate < 0 || float64(n) < minRate {
				minRate = float64(n)
			}
			if float64(n) < 0.9*o.rate {
				slowSeconds++
			}
		}
		extra["publish_min_msgs_per_s_1s"] = math.Max(minRate, 0)
		extra["publish_seconds_below_90pct"] = slowSeconds
	}
	return runReport{
		Name:          name,
		Params:        params,
		DurationS:     loadSeconds,
		Publish:       rateOf(published, published*uint64(o.size), loadSeconds),
		PublishErrors: errors,
		Consume:       rateOf(consumed, consumedBytes, loadSeconds),
		E2E:           summarize(all),
		Backlog:       map[string]uint64{"end": backlogEnd, "max": backlogEnd},
		Consumers:     consumers,
		Fairness:      map[string]float64{"rate_jain": jain, "p99_max_over_min": spread},
		Series:        series,
		RSSMax:        rssMax,
		Extra:         extra,
	}, nil
}

// gib is what the "with stuck clients" run publishes at least, by default.
const gib = 1 << 30

func main() {
	var o options
	var perRunS float64
	flag.StringVar(&o.scenario, "scenario", "slow-consumer", "slow-consumer or stuck-consumer")
	flag.StringVar(&o.url, "url", "nats://127.0.0.1:4222", "NATS server for the publisher and the fast (and stuck) subscribers")
	flag.StringVar(&o.slowURL, "slow-url", "", "the delay proxy in front of the same server, for the slow subscriber (slow-consumer)")
	flag.StringVar(&o.subject, "subject", "", "subject [default: a unique one]")
	flag.StringVar(&o.out, "out", "bench/results/tmp", "directory for <scenario>-<label>.json")
	flag.StringVar(&o.label, "label", "nats", "the broker's name in the report")
	flag.StringVar(&o.command, "command", "", "the command line to record [default: this one]")
	flag.Float64Var(&o.rate, "rate", 4000, "messages per second [stuck-consumer: 25000; with -quick 2000]")
	flag.IntVar(&o.size, "size", 1024, "message size in bytes")
	flag.IntVar(&o.fast, "fast", 3, "fast subscribers")
	flag.IntVar(&o.stuck, "stuck", 2, "stuck subscribers (stuck-consumer)")
	flag.IntVar(&o.pid, "server-pid", 0, "the server's process id, for its resident memory")
	flag.IntVar(&o.delayMs, "delay-ms", 200, "the proxy's delay, for the report (slow-consumer)")
	flag.Float64Var(&perRunS, "run-seconds", 55, "seconds per run [stuck-consumer: enough for 1 GiB at -rate and -size; with -quick 3]")
	flag.BoolVar(&o.quick, "quick", false, "mark the report as a quick run (stuck-consumer: shorter and slower by default)")
	flag.Float64Var(&o.rssLimitMiB, "rss-limit-mib", 4096, "close the stuck clients should the server's memory pass this (stuck-consumer; 0: never)")
	warmupFraction := flag.Float64("warmup-fraction", 0.1, "share of each run left out of the percentiles")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.size = max(o.size, 8)
	switch o.scenario {
	case "slow-consumer":
		if o.slowURL == "" {
			fmt.Fprintln(os.Stderr, "nats-slow-consumer: -slow-url (the delay proxy) is required")
			os.Exit(2)
		}
	case "stuck-consumer":
		if !set["rate"] {
			o.rate = 25000
			if o.quick {
				o.rate = 2000
			}
		}
		if !set["run-seconds"] {
			perRunS = math.Ceil(gib / (o.rate * float64(o.size)))
			if o.quick {
				perRunS = 3
			}
		}
		if o.stuck < 1 {
			fmt.Fprintln(os.Stderr, "nats-slow-consumer: -stuck must be at least 1")
			os.Exit(2)
		}
	default:
		fmt.Fprintf(os.Stderr, "nats-slow-consumer: unknown -scenario %q (slow-consumer or stuck-consumer)\n", o.scenario)
		os.Exit(2)
	}
	if o.rate <= 0 || perRunS <= 0 || o.fast < 1 {
		fmt.Fprintln(os.Stderr, "nats-slow-consumer: -rate, -run-seconds and -fast must be positive")
		os.Exit(2)
	}
	if o.subject == "" {
		o.subject = fmt.Sprintf("bench.%s.%d", o.scenario, time.Now().UnixNano())
	}
	if o.command == "" {
		// As a reader reruns it, not with the path of this build's binary.
		o.command = strings.Join(append([]string{"bench/nats: go run ."}, os.Args[1:]...), " ")
	}
	o.perRun = time.Duration(perRunS * float64(time.Second))
	o.warmup = time.Duration(*warmupFraction * float64(o.perRun))
	started := time.Now()
	r := report{
		Format: 1, Scenario: o.scenario, Label: o.label, Bootstrap: o.url, Command: o.command,
		Cores: runtime.NumCPU(), StartedAt: started.UTC().Format("2006-01-02T15:04:05Z"), Quick: o.quick,
	}
	var specs []runSpec
	if o.scenario == "slow-consumer" {
		r.Notes = []string{
			fmt.Sprintf("NATS core publish/subscribe: %.0f msg/s of %d B, %d fast subscribers; the slow subscriber "+
				"connects through headway bench proxy (%d ms each way); %.1f s per run, the first %.1f s of each left out of the percentiles (warm-up)",
				o.rate, o.size, o.fast, o.delayMs, perRunS, o.warmup.Seconds()),
			"core NATS has no acknowledgement (no publish latency) and no replay (no catch-up subscriber); nothing is stored",
		}
		specs = []runSpec{{name: "fast consumers only"}, {name: "with slow consumers", slow: true}}
	} else {
		r.Notes = []string{
			fmt.Sprintf("NATS core publish/subscribe: %.0f msg/s of %d B (%.0f MB per run), %d fast subscribers; %.1f s per run, "+
				"the first %.1f s of each left out of the percentiles (warm-up)",
				o.rate, o.size, o.rate*float64(o.size)*perRunS/1e6, o.fast, perRunS, o.warmup.Seconds()),
			fmt.Sprintf("%d stuck clients (subscribers): raw TCP connections that read INFO, send CONNECT, SUB and PING, read the PONG, "+
				"and never read again, with SO_RCVBUF %d B set before connecting; each writes PING every %s and watches its "+
				"TCP state to see whether the server closed it", o.stuck, stuckRcvBuf, stuckPingEvery),
			"core NATS has no acknowledgement (no publish latency) and stores nothing; the server's resident memory is sampled every second",
			"the publisher keeps to its schedule: after a stall it sends what fell due at once, so its average rate can hide a stall; " +
				"extra.publish_min_msgs_per_s_1s and the series show it; a message's latency counts from its stamp, taken before the publish call",
		}
		specs = []runSpec{{name: "fast consumers only"}, {name: "with stuck clients", stuck: o.stuck}}
	}
	for _, spec := range specs {
		run, err := runOnce(o, spec)
		if err != nil {
			fmt.Fprintln(os.Stderr, "nats-slow-consumer:", err)
			os.Exit(1)
		}
		r.Runs = append(r.Runs, run)
	}
	without, with := r.Runs[0].E2E.P99, r.Runs[1].E2E.P99
	ratio := 0.0
	if without > 0 {
		ratio = with / without
	}
	var afterS []float64 // stuck-consumer: when the server dropped each stuck subscriber
	if o.scenario == "slow-consumer" {
		var slow map[string]any
		for _, c := range r.Runs[1].Consumers {
			if c.Role == "slow" {
				slow = map[string]any{"msgs_per_s": c.Consume.MsgsPerS, "e2e_p99_ms": c.E2E.P99, "lag_end": c.LagEnd}
			}
		}
		r.Summary = map[string]any{
			"fast_e2e_p99_ms_without":    without,
			"fast_e2e_p99_ms_with":       with,
			"fast_p99_with_over_without": ratio,
			"fast_e2e_p50_ms_without":    r.Runs[0].E2E.P50,
			"fast_e2e_p50_ms_with":       r.Runs[1].E2E.P50,
			"publish_msgs_per_s_without": r.Runs[0].Publish.MsgsPerS,
			"publish_msgs_per_s_with":    r.Runs[1].Publish.MsgsPerS,
			"slow":                       slow,
			"catch_up":                   nil,
			"disconnects_with":           r.Runs[1].Extra["disconnects"],
		}
	} else {
		pubRatio := 0.0
		if r.Runs[0].Publish.MsgsPerS > 0 {
			pubRatio = r.Runs[1].Publish.MsgsPerS / r.Runs[0].Publish.MsgsPerS
		}
		limitAt, limitHit := r.Runs[1].Extra["rss_limit_hit_at_s"].(float64)
		if limitHit {
			r.Notes = append(r.Notes, fmt.Sprintf("the server's resident memory passed %.0f MiB %.1f s into run 2: the stuck "+
				"clients were disconnected then, so the rest of run 2 ran without them", o.rssLimitMiB, limitAt))
		}
		afterS = []float64{}
		var requests uint64
		blocked := 0
		for _, s := range r.Runs[1].Extra["stuck"].([]map[string]any) {
			if t, ok := s["disconnect_after_s"].(float64); ok {
				afterS = append(afterS, math.Round(t*10)/10)
			}
			requests += s["requests_written"].(uint64)
			if s["write_blocked"].(bool) {
				blocked++
			}
		}
		sort.Float64s(afterS)
		mibOf := func(b uint64) float64 { return float64(b) / (1 << 20) }
		// Keys as documented in docs/bench.md (stuck-consumer), shared with headway bench.
		r.Summary = map[string]any{
			"fast_e2e_p99_ms_without":    without,
			"fast_e2e_p99_ms_with":       with,
			"fast_p99_with_over_without": ratio,
			"fast_e2e_p50_ms_without":    r.Runs[0].E2E.P50,
			"fast_e2e_p50_ms_with":       r.Runs[1].E2E.P50,
			"publish_msgs_per_s_without": r.Runs[0].Publish.MsgsPerS,
			"publish_msgs_per_s_with":    r.Runs[1].Publish.MsgsPerS,
			"publish_with_over_without":  pubRatio,
			"publish_p99_ms_without":     nil, // core NATS has no acknowledgement
			"publish_p99_ms_with":        nil,
			"produced_mb_without":        mibOf(r.Runs[0].Publish.Bytes),
			"produced_mb_with":           mibOf(r.Runs[1].Publish.Bytes),
			"broker_rss_mib_max_without": r.Runs[0].RSSMax,
			"broker_rss_mib_max_with":    r.Runs[1].RSSMax,
			"stuck_clients":              o.stuck,
			"stuck_requests_written":     requests,
			"stuck_write_blocked":        blocked,
			"stuck_closed_by_broker":     r.Runs[1].Extra["stuck_closed_by_broker"],
			"stuck_disconnect_after_s":   afterS, // NATS only: when the server closed each one
			"rss_limit_mib":              o.rssLimitMiB,
			"rss_limit_hit":              limitHit,
			"backlog_mb":                 nil, // core NATS stores nothing: no backlog to write
			"prefill_s":                  nil,
		}
	}
	r.DurationS = time.Since(started).Seconds()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	path := filepath.Join(o.out, o.scenario+"-"+o.label+".json")
	data, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "[%s] %s done in %.1f s: %s (fast p99 %.2f ms without, %.2f ms with)\n",
		o.scenario, o.label, r.DurationS, path, without, with)
	if o.scenario == "stuck-consumer" {
		fmt.Fprintf(os.Stderr, "[stuck-consumer] published %.0f MiB with stuck clients; server rss max %s MiB without, %s MiB with; "+
			"stuck closed by the server %v/%d after %v s\n",
			r.Summary["produced_mb_with"], mib(r.Runs[0].RSSMax), mib(r.Runs[1].RSSMax),
			r.Summary["stuck_closed_by_broker"], o.stuck, afterS)
	}
}

func mib(v *float64) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf("%.0f", *v)
}
