package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/internal/pace"
	"github.com/ucmd/ucmd/internal/status"
)

// SocketName is the trace socket's name in the runtime directory, next to
// the status socket and made with the same access rule.
const SocketName = "trace.sock"

// DefaultBuffer is how many MADs a subscriber's buffer holds when the
// request does not say; MaxBuffer bounds what a request may ask.
const (
	DefaultBuffer = 4096
	MaxBuffer     = 1 << 16
)

// MaxSubscribers bounds the traces at once (each holds up to MaxBuffer
// MADs of memory); one more is refused with an error line.
const MaxSubscribers = 16

// maxConns bounds the trace socket's connections at once: the
// subscribers, and as many again that are still sending their request or
// being refused. More wait in the kernel's backlog.
const maxConns = 2 * MaxSubscribers

// Owner is one ucm id of a device as the trace resolves comm ids to
// processes: the opener of the file that holds it.
type Owner struct {
	PID          int
	Comm         string
	LocalCommID  uint32
	RemoteCommID uint32
	ServiceID    uint64
	Listening    bool
}

// OwnersFunc lists the ids of the device named (the daemon walks the ucm
// device's files). It runs on a subscriber's goroutine, never on the CM's
// path.
type OwnersFunc func(dev string) []Owner

// Hub is the daemon's trace: a cmcore.Observer that hands every MAD to
// the current subscribers. With none, ObserveMAD is one atomic load. A
// subscriber has a bounded buffer; when it is full the MAD is dropped for
// that subscriber only and counted, and the subscriber's stream gets a
// marker with the count where the gap is, so a slow reader never slows
// the CM.
type Hub struct {
	owners OwnersFunc
	log    *slog.Logger
	nsubs  atomic.Int32
	seq    atomic.Uint64

	mu     sync.RWMutex
	subs   map[*sub]struct{}
	asking map[net.Conn]struct{} // connections not yet through their request
	lns    []net.Listener
	closed bool
	wg     sync.WaitGroup

	omu     sync.Mutex
	otables map[string]*ownerCache // by device, shared by the subscribers
	// forgot counts Forget's calls: a subscriber that sees it move drops
	// its own caches of devices.
	forgot atomic.Uint64

	pmu  sync.Mutex  // held for an owner read: one at a time
	pace pace.Spacer // spaces the owner reads of every device (ownerTable)
}

// NewHub makes a hub; owners may be nil (no pid, process name or service
// id resolution).
func NewHub(owners OwnersFunc, log *slog.Logger) *Hub {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if owners == nil {
		owners = func(string) []Owner { return nil }
	}
	return &Hub{owners: owners, log: log, subs: make(map[*sub]struct{}), asking: make(map[net.Conn]struct{}),
		otables: make(map[string]*ownerCache)}
}

// Forget drops what the hub and its subscribers keep of the device named
// (its owner table, its ports' attributes): the daemon calls it when the
// device is retired, which a trace left running for weeks may see many
// times (Soft-RoCE devices made again under new names).
func (h *Hub) Forget(dev string) {
	h.omu.Lock()
	delete(h.otables, dev)
	h.omu.Unlock()
	h.forgot.Add(1)
}

// record is one observed MAD, copied out of the CM's event.
type record struct {
	seq    uint64
	time   time.Time
	dev    hw.Device
	port   int
	dir    cmcore.MADDirection
	reason string
	mad    hw.MAD
	peer   hw.Address // GRH nil; see grh
	grh    hw.GRH
	hasGRH bool
	lost   uint64 // MADs this subscriber lost just before this one
}

// WantsTime implements cmcore.TimeObserver: event times only while
// someone traces.
func (h *Hub) WantsTime() bool { return h.nsubs.Load() > 0 }

// ObserveMAD implements cmcore.Observer.
func (h *Hub) ObserveMAD(ev *cmcore.MADEvent) {
	if h.nsubs.Load() == 0 {
		return
	}
	at := ev.Time
	if at.IsZero() {
		// The first subscriber arrived after the CM asked WantsTime.
		at = time.Now()
	}
	r := record{
		seq: h.seq.Add(1), time: at, dev: ev.Device, port: ev.Port, dir: ev.Dir,
		reason: ev.Reason, mad: *ev.MAD, peer: ev.Peer,
	}
	if g := ev.Peer.GRH; g != nil {
		r.grh, r.hasGRH = *g, true
	}
	r.peer.GRH = nil
	h.mu.RLock()
	for s := range h.subs {
		s.push(&r)
	}
	h.mu.RUnlock()
}

// MaxRequest bounds a Request line, newline included; a real one is
// under 200 bytes.
const MaxRequest = 4096

// Request is the first line a trace client sends: what to stream.
type Request struct {
	Filter Filter `json:"filter"`
	// Buffer is the subscriber's buffer in MADs (0: DefaultBuffer; at
	// most MaxBuffer).
	Buffer int `json:"buffer,omitempty"`
}

// Serve accepts trace clients on ln until Close (which closes ln). Each
// client sends a Request line, reads {"subscribed":true} once it is
// subscribed (or {"error":"..."}), and then Event lines until it
// disconnects.
func (h *Hub) Serve(ln net.Listener) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		ln.Close()
		return
	}
	h.lns = append(h.lns, ln)
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		status.AcceptLoop(ln, maxConns, &h.wg, h.log, "trace socket", h.serveConn)
	}()
}

func (h *Hub) serveConn(c net.Conn) {
	defer c.Close()
	// A client that connects and says nothing holds a goroutine only
	// this long, and Close does not wait for it.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.asking[c] = struct{}{}
	h.mu.Unlock()
	// Nor may it make the daemon buffer more than one request's worth: a
	// line that does not end within MaxRequest bytes is refused.
	br := bufio.NewReaderSize(c, MaxRequest)
	line, err := br.ReadSlice('\n')
	h.mu.Lock()
	delete(h.asking, c)
	h.mu.Unlock()
	if errors.Is(err, bufio.ErrBufferFull) {
		fmt.Fprintf(c, "{\"error\":%q}\n", fmt.Sprintf("trace request longer than %d bytes", MaxRequest))
		return
	}
	if err != nil {
		h.log.Debug("trace socket: no request", "err", err)
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		fmt.Fprintf(c, "{\"error\":%q}\n", "bad trace request: "+err.Error())
		return
	}
	c.SetReadDeadline(time.Time{})
	s := h.subscribe(req, c)
	if s == nil {
		fmt.Fprintf(c, "{\"error\":%q}\n", fmt.Sprintf("too many traces at once (%d) or the daemon is stopping", MaxSubscribers))
		return
	}
	// The client knows it is subscribed: what it does from now on is
	// traced.
	if _, err := io.WriteString(c, "{\"subscribed\":true}\n"); err != nil {
		h.unsubscribe(s)
		return
	}
	// The client sends nothing more; its EOF (or the hub's Close, which
	// closes c) ends the subscription.
	go func() {
		io.Copy(io.Discard, br)
		s.stop()
	}()
	s.run()
	h.unsubscribe(s)
}

// Subscribe streams to w, as a client of the socket would be served,
// until w fails or the returned stop function is called; for in-process
// use and tests. The stream ends after stop with the events already
// buffered.
func (h *Hub) Subscribe(req Request, w io.Writer) (done <-chan struct{}, stop func()) {
	s := h.subscribe(req, w)
	ch := make(chan struct{})
	if s == nil {
		close(ch)
		return ch, func() {}
	}
	go func() {
		s.run()
		h.unsubscribe(s)
		close(ch)
	}()
	return ch, s.stop
}

func (h *Hub) subscribe(req Request, w io.Writer) *sub {
	n := req.Buffer
	if n <= 0 {
		n = DefaultBuffer
	}
	n = min(n, MaxBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.subs) >= MaxSubscribers {
		return nil
	}
	s := &sub{hub: h, q: newQueue(n), quit: make(chan struct{}), w: w, filter: newMatcher(req.Filter)}
	h.subs[s] = struct{}{}
	h.nsubs.Add(1)
	return s
}

func (h *Hub) unsubscribe(s *sub) {
	h.mu.Lock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		h.nsubs.Add(-1)
	}
	last := len(h.subs) == 0
	h.mu.Unlock()
	if last {
		// The owner tables serve the subscribers only; dropped with the
		// last, they hold no snapshot of ids, nor an entry per device
		// name ever traced (soft-RoCE devices come back under new names).
		h.omu.Lock()
		clear(h.otables)
		h.omu.Unlock()
	}
}

// Subscribers is how many clients are subscribed.
func (h *Hub) Subscribers() int { return int(h.nsubs.Load()) }

// Close stops accepting, ends every subscription and waits for them.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	var errs []error
	for _, ln := range h.lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for s := range h.subs {
		s.stop()
	}
	for c := range h.asking {
		c.SetReadDeadline(time.Now()) // its read ends at once
	}
	h.mu.Unlock()
	h.wg.Wait()
	return errors.Join(errs...)
}

// sub is one subscriber.
type sub struct {
	hub     *Hub
	q       queue
	pending atomic.Uint64 // lost since the last record that got through
	quit    chan struct{}
	once    sync.Once
	w       io.Writer
	filter  *matcher
	res     resolver
}

// queue is a subscriber's buffer: up to max records in arrival order,
// whose memory grows with what waits in it. (A channel of max records
// held them all from the start: 26 MB for a trace that asked for
// MaxBuffer, sixteen of which a member of --status-group could hold.)
type queue struct {
	mu    sync.Mutex
	recs  []record
	max   int
	ready chan struct{} // a token once recs is no longer empty
}

func newQueue(max int) queue { return queue{max: max, ready: make(chan struct{}, 1)} }

// put adds a copy of r unless the queue is full; it never blocks.
func (q *queue) put(r *record) bool {
	q.mu.Lock()
	if len(q.recs) >= q.max {
		q.mu.Unlock()
		return false
	}
	q.recs = append(q.recs, *r)
	first := len(q.recs) == 1
	q.mu.Unlock()
	if first {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return true
}

// take returns what waits and leaves spare, emptied, in its place.
func (q *queue) take(spare []record) []record {
	q.mu.Lock()
	out := q.recs
	q.recs = spare[:0]
	q.mu.Unlock()
	return out
}

func (q *queue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.recs) == 0
}

// push never blocks: a full buffer loses the MAD and counts it.
func (s *sub) push(r *record) {
	lost := s.pending.Swap(0)
	r.lost = lost
	if !s.q.put(r) {
		s.pending.Add(lost + 1)
	}
	r.lost = 0
}

func (s *sub) stop() {
	s.once.Do(func() {
		close(s.quit)
		if c, ok := s.w.(io.Closer); ok {
			c.Close()
		}
	})
}

// run writes the subscriber's stream until its writer fails or stop.
func (s *sub) run() {
	bw := bufio.NewWriterSize(s.w, 64<<10)
	enc := json.NewEncoder(bw)
	var spare []record
	var last time.Time
	// lostNow reports losses with nothing after them yet now rather than
	// with the next MAD.
	lostNow := func() bool {
		if n := s.pending.Swap(0); n > 0 {
			return enc.Encode(&Event{Time: last, Lost: n}) == nil
		}
		return true
	}
	for {
		quit := false
		select {
		case <-s.q.ready:
		case <-s.quit:
			// What is already buffered still goes out (a closed
			// connection makes these writes fail at once).
			quit = true
		}
		batch := s.q.take(spare)
		for i := range batch {
			last = batch[i].time
			if !s.write(enc, &batch[i]) {
				return
			}
		}
		// The records hold pointers (the device, the reason): cleared,
		// so that a kept slice pins nothing. A slice a burst grew past
		// the default buffer is kept while batches fill a quarter of it,
		// and left to the collector after.
		clear(batch)
		if cap(batch) <= DefaultBuffer || len(batch) >= cap(batch)/4 {
			spare = batch
		} else {
			spare = nil
		}
		if quit {
			lostNow()
			bw.Flush()
			return
		}
		if s.q.empty() {
			if !lostNow() || bw.Flush() != nil {
				return
			}
		}
	}
}

// write writes r (after its loss marker) if the filter takes it.
func (s *sub) write(enc *json.Encoder, r *record) bool {
	if r.lost > 0 {
		if enc.Encode(&Event{Time: r.time, Lost: r.lost}) != nil {
			return false
		}
	}
	ev, msg := s.res.event(s.hub, r)
	if !s.filter.match(&ev, &msg) {
		return true
	}
	return enc.Encode(&ev) == nil
}
