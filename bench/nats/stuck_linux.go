package main

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// smallRcvBuf sets SO_RCVBUF on the socket before it connects, so the window the
// connection advertises is small from the first segment.
func smallRcvBuf(bytes int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, bytes)
		}); cerr != nil {
			return cerr
		}
		return err
	}
}

// rcvBufOf is SO_RCVBUF as the kernel set it (Linux doubles the value asked for).
func rcvBufOf(c *net.TCPConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	v := 0
	_ = raw.Control(func(fd uintptr) {
		if n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
			v = n
		}
	})
	return v
}

var tcpStates = map[uint8]string{
	1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
	6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING",
}

// socketState is the bytes waiting unread in the socket's receive queue and its TCP state.
func socketState(c *net.TCPConn) (unread int, state string, ok bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, "", false
	}
	_ = raw.Control(func(fd uintptr) {
		if n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil {
			unread = n
		}
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			state = tcpStates[info.State]
			if state == "" {
				state = "UNKNOWN"
			}
			ok = true
		}
	})
	return unread, state, ok
}
