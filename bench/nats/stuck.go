package main

// A stuck subscriber: a raw TCP connection that speaks just enough of the NATS text
// protocol to subscribe, with a small receive buffer, and then never reads its socket
// again. The server's messages pile up in its own outbound buffer for that client; what
// the scenario asks is whether that costs the other subscribers, the publisher or the
// server's memory, and whether (and when) the server gives up and closes the connection.

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// stuckRcvBuf is the receive buffer asked for (SO_RCVBUF, set before connecting so the
// TCP window is negotiated small; Linux doubles what it is given).
const stuckRcvBuf = 4096

// stuckPingEvery is how often a stuck client writes PING to find out whether the server
// closed the connection: a write to a connection the server has closed draws a reset, and
// the write after it (or the socket's TCP state, where it can be read) fails.
const stuckPingEvery = time.Second

// stuckCheckEvery is how often the socket's TCP state is looked at between pings.
const stuckCheckEvery = 100 * time.Millisecond

type stuckClient struct {
	name string
	conn *net.TCPConn

	mu              sync.Mutex
	requestsWritten uint64 // protocol commands written: CONNECT, SUB, PING, then the pings
	bytesWritten    uint64
	pingsSent       uint64
	pingTimeouts    uint64 // PING writes not accepted within stuckPingEvery
	disconnected    bool   // the server closed the connection
	disconnectAt    time.Time
	disconnectHow   string
	unreadBytesMax  int // bytes the kernel held for it unread (SIOCINQ), where known
	rcvBufEff       int // SO_RCVBUF as the kernel set it, where known
}

// natsAddr turns a nats:// URL (or a bare HOST:PORT) into HOST:PORT.
func natsAddr(raw string) (string, error) {
	if !strings.Contains(raw, "://") {
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	host := u.Host
	if i := strings.IndexByte(host, ','); i >= 0 {
		host = host[:i]
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "4222")
	}
	return host, nil
}

// dialStuck connects, reads the server's INFO line, subscribes to subject and waits for
// the PONG that confirms the subscription is registered. After it returns, nothing ever
// reads the socket again.
func dialStuck(name, addr, subject string, sid int) (*stuckClient, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: smallRcvBuf(stuckRcvBuf)}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	// Also through the portable call; a no-op where the dialer already set it.
	_ = tc.SetReadBuffer(stuckRcvBuf)
	fail := func(err error) (*stuckClient, error) {
		_ = tc.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	// The server greets with one INFO line and sends nothing more until the client speaks,
	// so a buffered reader cannot take anything meant for later.
	br := bufio.NewReader(tc)
	line, err := br.ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("reading INFO: %w", err))
	}
	if !strings.HasPrefix(line, "INFO ") {
		return fail(fmt.Errorf("expected INFO, got %q", strings.TrimSpace(line)))
	}
	hello := fmt.Sprintf("CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":%q}\r\nSUB %s %d\r\nPING\r\n", name, subject, sid)
	if _, err := tc.Write([]byte(hello)); err != nil {
		return fail(fmt.Errorf("subscribing: %w", err))
	}
	// The subject is the run's own and the publisher has not started, so the answer to
	// PING is the next thing the server sends (or -ERR if it refused something).
	line, err = br.ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("waiting for PONG: %w", err))
	}
	if strings.TrimSpace(line) != "PONG" {
		return fail(fmt.Errorf("expected PONG, got %q", strings.TrimSpace(line)))
	}
	if br.Buffered() > 0 {
		return fail(fmt.Errorf("unexpected %d bytes after PONG", br.Buffered()))
	}
	_ = tc.SetDeadline(time.Time{})
	s := &stuckClient{name: name, conn: tc, requestsWritten: 3, bytesWritten: uint64(len(hello))}
	s.rcvBufEff = rcvBufOf(tc)
	return s, nil
}

// watch pings the server every stuckPingEvery and looks at the socket's state every
// stuckCheckEvery, until stop is closed or the server is seen to have closed the
// connection. It never reads.
func (s *stuckClient) watch(start time.Time, stop <-chan struct{}, done *sync.WaitGroup) {
	defer done.Done()
	tick := time.NewTicker(stuckCheckEvery)
	defer tick.Stop()
	nextPing := time.Now().Add(stuckPingEvery)
	for {
		select {
		case <-stop:
			s.observe(start) // one last look
			return
		case now := <-tick.C:
			if s.observe(start) {
				return
			}
			if now.Before(nextPing) {
				continue
			}
			nextPing = now.Add(stuckPingEvery)
			_ = s.conn.SetWriteDeadline(now.Add(stuckPingEvery))
			n, err := s.conn.Write([]byte("PING\r\n"))
			s.mu.Lock()
			s.bytesWritten += uint64(n)
			if err == nil {
				s.pingsSent++
				s.requestsWritten++
				s.mu.Unlock()
				continue
			}
			timeout := false
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				// The server did not take 6 bytes in a second: it stopped reading this
				// connection. Not a close; counted as write_blocked.
				s.pingTimeouts++
				timeout = true
			}
			s.mu.Unlock()
			if timeout {
				continue
			}
			s.markDisconnected(start, "PING write failed: "+err.Error())
			return
		}
	}
}

// observe records the unread bytes and reports whether the connection is gone, going by
// its TCP state.
func (s *stuckClient) observe(start time.Time) bool {
	unread, state, ok := socketState(s.conn)
	if !ok {
		return false
	}
	s.mu.Lock()
	if unread > s.unreadBytesMax {
		s.unreadBytesMax = unread
	}
	s.mu.Unlock()
	if state != "" && state != "ESTABLISHED" {
		s.markDisconnected(start, "TCP state "+state)
		return true
	}
	return false
}

func (s *stuckClient) markDisconnected(start time.Time, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disconnected {
		return
	}
	s.disconnected = true
	s.disconnectAt = time.Now()
	s.disconnectHow = how
	fmt.Fprintf(os.Stderr, "[stuck-consumer] %s disconnected by the server after %.1f s (%s)\n",
		s.name, s.disconnectAt.Sub(start).Seconds(), how)
}

// report is what the stuck client did, for the run's extra.
func (s *stuckClient) report(start time.Time) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := map[string]any{
		"name":               s.name,
		"requests_written":   s.requestsWritten,
		"bytes_written":      s.bytesWritten,
		"write_blocked":      s.pingTimeouts > 0,
		"closed_by_broker":   s.disconnected,
		"pings_sent":         s.pingsSent,
		"ping_timeouts":      s.pingTimeouts,
		"disconnect_after_s": nil,
		"disconnect_how":     nil,
		"unread_bytes_max":   nil,
		"rcvbuf_bytes":       nil,
	}
	if s.disconnected {
		r["disconnect_after_s"] = s.disconnectAt.Sub(start).Seconds()
		r["disconnect_how"] = s.disconnectHow
	}
	if s.unreadBytesMax > 0 {
		r["unread_bytes_max"] = s.unreadBytesMax
	}
	if s.rcvBufEff > 0 {
		r["rcvbuf_bytes"] = s.rcvBufEff
	}
	return r
}
