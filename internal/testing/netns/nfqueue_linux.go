package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel here may have no netem qdisc (it is an optional module, and
// many VM kernels leave it out), so delay and loss are made another way:
// an iptables rule in the node's namespace sends every packet the node
// sends on its link to a netfilter queue, and a reader in the test's
// process holds each packet for the delay before it tells the kernel to
// let it go (or drops it, at the loss rate). The packets wait in the
// kernel; only their IDs come to the reader.

// Netlink's nfnetlink_queue protocol (linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue = 3
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2
	nfqaCfgCmd     = 1
	nfqaCfgParams  = 2
	nfqaCfgMaxLen  = 3

	nfqnlCfgCmdBind = 1
	nfqnlCopyMeta   = 1

	nfAccept = 1
	nfDrop   = 0
)

// Delay holds the packets a node sends for d, and drops a share loss of
// them (0 to 1), until Stop.
type Delay struct {
	node  *Node
	queue uint16
	fd    int
	d     time.Duration
	loss  float64

	mu      sync.Mutex
	pending []heldPacket
	wake    chan struct{}
	done    chan struct{}
	stopped bool
	wg      sync.WaitGroup
}

type heldPacket struct {
	id  uint32
	due time.Time
}

// Delay adds d to every packet node sends on its link and drops the share
// loss of them. A delay on each of two nodes adds to their round trip:
// 25 ms on every node is a 50 ms RTT between any two. Cleanup stops it.
func (node *Node) Delay(d time.Duration, loss float64) *Delay {
	n := node.net
	n.t.Helper()
	n.mu.Lock()
	queue := uint16(len(n.delays) + 1)
	n.mu.Unlock()
	fd, err := socketIn(node.NS)
	if err != nil {
		n.t.Fatalf("netns: delay in %s: %v", node.Name, err)
	}
	q := &Delay{node: node, queue: queue, fd: fd, d: d, loss: loss, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if err := q.bind(); err != nil {
		unix.Close(fd)
		n.t.Fatalf("netns: delay in %s: binding queue %d: %v", node.Name, queue, err)
	}
	q.wg.Add(2)
	go q.read()
	go q.release()
	// The rule last: packets go to the queue only once it is read. With
	// --queue-bypass a packet passes undelayed if no reader is bound.
	n.run("ip", "netns", "exec", node.NS, "iptables", "-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE",
		"--queue-num", fmt.Sprint(queue), "--queue-bypass")
	n.mu.Lock()
	n.delays = append(n.delays, q)
	n.mu.Unlock()
	n.t.Cleanup(q.Stop)
	return q
}

// Stop removes the rule and lets every held packet go.
func (q *Delay) Stop() {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return
	}
	q.stopped = true
	q.mu.Unlock()
	_ = exec.Command("ip", "netns", "exec", q.node.NS, "iptables", "-D", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE",
		"--queue-num", fmt.Sprint(q.queue), "--queue-bypass").Run()
	close(q.done)
	q.wg.Wait()
	unix.Close(q.fd) // the kernel lets the packets of a closed queue go
}

// socketIn opens a netfilter netlink socket in the namespace ns: a socket
// belongs to the namespace of the thread that made it, for its life.
func socketIn(ns string) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked if it could not return to its own
		// namespace: it then ends with this goroutine.
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			ch <- result{-1, err}
			return
		}
		defer self.Close()
		target, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- result{-1, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{-1, fmt.Errorf("setns: %w", err)}
			return
		}
		fd, serr := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			if serr == nil {
				unix.Close(fd)
			}
			ch <- result{-1, fmt.Errorf("setns back: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		if serr == nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
			// A read returns every 100 ms, so that the reader sees Stop
			// (closing the socket would not wake it).
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000})
			serr = unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		}
		ch <- result{fd, serr}
	}()
	r := <-ch
	return r.fd, r.err
}

// bind asks the kernel for the queue's packets, metadata only.
func (q *Delay) bind() error {
	cmd := make([]byte, 4)
	cmd[0] = nfqnlCfgCmdBind
	if err := q.send(nfqnlMsgConfig, unix.NLM_F_ACK, attr(nfqaCfgCmd, cmd)); err != nil {
		return err
	}
	if err := q.ack(); err != nil {
		return err
	}
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params[0:4], 0xffff)
	params[4] = nfqnlCopyMeta
	maxLen := binary.BigEndian.AppendUint32(nil, 1<<16)
	if err := q.send(nfqnlMsgConfig, unix.NLM_F_ACK, attr(nfqaCfgParams, params), attr(nfqaCfgMaxLen, maxLen)); err != nil {
		return err
	}
	return q.ack()
}

// send writes one nfnetlink message of the queue's subsystem.
func (q *Delay) send(msgType uint16, flags uint16, attrs ...[]byte) error {
	body := []byte{unix.AF_UNSPEC, 0, 0, 0} // nfgenmsg: family, version, queue (big-endian)
	binary.BigEndian.PutUint16(body[2:], q.queue)
	for _, a := range attrs {
		body = append(body, a...)
	}
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(msg[0:4], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(msg[4:6], nfnlSubsysQueue<<8|msgType)
	binary.NativeEndian.PutUint16(msg[6:8], unix.NLM_F_REQUEST|flags)
	msg = append(msg, body...)
	return unix.Sendto(q.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// ack reads the kernel's answer to a request sent with NLM_F_ACK.
func (q *Delay) ack() error {
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(q.fd, buf, 0)
	if err != nil {
		return err
	}
	if n < unix.NLMSG_HDRLEN+4 || binary.NativeEndian.Uint16(buf[4:6]) != unix.NLMSG_ERROR {
		return errors.New("no netlink acknowledgement")
	}
	if code := int32(binary.NativeEndian.Uint32(buf[unix.NLMSG_HDRLEN:])); code != 0 {
		return unix.Errno(-code)
	}
	return nil
}

func attr(typ uint16, data []byte) []byte {
	l := 4 + len(data)
	b := make([]byte, (l+3)&^3)
	binary.NativeEndian.PutUint16(b[0:2], uint16(l))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	copy(b[4:], data)
	return b
}

// read takes the queued packets' IDs and holds them.
func (q *Delay) read() {
	defer q.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-q.done:
			return
		default:
		}
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
				continue // ENOBUFS: the reader fell behind; the kernel dropped those packets
			}
			return
		}
		now := time.Now()
		for msgs := buf[:n]; len(msgs) >= unix.NLMSG_HDRLEN; {
			l := int(binary.NativeEndian.Uint32(msgs[0:4]))
			if l < unix.NLMSG_HDRLEN || l > len(msgs) {
				break
			}
			if binary.NativeEndian.Uint16(msgs[4:6]) == nfnlSubsysQueue<<8|nfqnlMsgPacket {
				if id, ok := packetID(msgs[unix.NLMSG_HDRLEN+4 : l]); ok {
					q.hold(id, now)
				}
			}
			msgs = msgs[(l+3)&^3:]
		}
	}
}

// packetID finds the packet header attribute's ID.
func packetID(attrs []byte) (uint32, bool) {
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs[0:2]))
		typ := binary.NativeEndian.Uint16(attrs[2:4]) & 0x3fff
		if l < 4 || l > len(attrs) {
			return 0, false
		}
		if typ == nfqaPacketHdr && l >= 8 {
			return binary.BigEndian.Uint32(attrs[4:8]), true
		}
		attrs = attrs[(l+3)&^3:]
	}
	return 0, false
}

func (q *Delay) hold(id uint32, now time.Time) {
	q.mu.Lock()
	q.pending = append(q.pending, heldPacket{id: id, due: now.Add(q.d)})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// release lets each held packet go at its time (they are due in the
// order they came, the delay being the same for all).
func (q *Delay) release() {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		var next heldPacket
		have := len(q.pending) > 0
		if have {
			next = q.pending[0]
		}
		q.mu.Unlock()
		if !have {
			select {
			case <-q.wake:
				continue
			case <-q.done:
				return
			}
		}
		if wait := time.Until(next.due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-q.done:
				return
			}
		}
		q.mu.Lock()
		q.pending = q.pending[1:]
		q.mu.Unlock()
		verdict := uint32(nfAccept)
		if q.loss > 0 && rand.Float64() < q.loss {
			verdict = nfDrop
		}
		hdr := make([]byte, 8)
		binary.BigEndian.PutUint32(hdr[0:4], verdict)
		binary.BigEndian.PutUint32(hdr[4:8], next.id)
		_ = q.send(nfqnlMsgVerdict, 0, attr(nfqaVerdictHdr, hdr))
	}
}
