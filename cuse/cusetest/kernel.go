// Package cusetest is a fake kernel for testing CUSE devices without root
// or /dev/cuse. It plays the kernel's side of the FUSE wire protocol over a
// SOCK_SEQPACKET socketpair (which keeps message boundaries, as /dev/cuse
// does): it performs CUSE_INIT with a cuse.Server serving the device under
// test, sends OPEN, READ, WRITE, POLL, INTERRUPT and RELEASE requests with
// the caller, flags and unique ids a test chooses, and collects replies and
// poll notifications. It checks every reply the way the kernel does and
// fails the test on protocol violations.
//
// Devices that access caller memory are given a *callermem.Fake by the test
// and the same Fake is handed to Start (Options.Memory), so the test
// arranges client buffers with it and inspects what the device wrote.
package cusetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/cuse/internal/wire"
)

// Opcodes a test may pass to Kernel.Send (enum fuse_opcode).
const (
	OpOpen      = uint32(wire.FUSE_OPEN)
	OpRead      = uint32(wire.FUSE_READ)
	OpWrite     = uint32(wire.FUSE_WRITE)
	OpRelease   = uint32(wire.FUSE_RELEASE)
	OpInterrupt = uint32(wire.FUSE_INTERRUPT)
	OpIoctl     = uint32(wire.FUSE_IOCTL)
	OpPoll      = uint32(wire.FUSE_POLL)
	OpCuseInit  = uint32(wire.CUSE_INIT)
)

// DefaultTimeout bounds Pending.Wait.
const DefaultTimeout = 10 * time.Second

// Options configure Start. The zero value is usable.
type Options struct {
	// Config is passed to cuse.NewServer; DevName defaults to "cusetest".
	Config cuse.Config
	// KernelMinor is the FUSE minor version the fake kernel offers in
	// CUSE_INIT; 0 means the current one.
	KernelMinor uint32
	// Memory is the caller memory the test gave the device; Kernel.Memory
	// returns it. nil means a fresh callermem.Fake.
	Memory *callermem.Fake
	// Timeout bounds Pending.Wait; 0 means DefaultTimeout.
	Timeout time.Duration
}

// InitReply holds the fields of the server's cuse_init_out.
type InitReply struct {
	Major, Minor       uint32 // protocol version
	Flags              uint32 // CUSE_UNRESTRICTED_IOCTL or 0
	MaxRead, MaxWrite  uint32
	DevMajor, DevMinor uint32 // 0:0 for a dynamic number
}

// Kernel is the fake kernel. Its methods may be called from any goroutine,
// but those that wait (the synchronous request helpers and Pending.Wait)
// fail the test with t.Fatal and must run on the test goroutine.
type Kernel struct {
	t       testing.TB
	conn    *os.File // the kernel's end
	srv     *cuse.Server
	mem     *callermem.Fake
	timeout time.Duration

	// Init is the server's answer to CUSE_INIT.
	Init InitReply
	// DevName is the DEVNAME the server registered.
	DevName string

	serveErr chan error
	readDone chan struct{}
	notes    chan uint64
	resends  sync.WaitGroup // INTERRUPTs being sent again (resendInterrupt)
	closing  atomic.Bool    // close has begun: the server may be gone

	mu      sync.Mutex
	pending map[uint64]*Pending
	// aborted: the server closed its end, and, as fuse_abort_conn, every
	// request pending then is answered ECONNABORTED, every later one
	// ENOTCONN.
	aborted    bool
	answered   map[uint64]bool
	nextUnique uint64
	nextKh     uint64
	violations []string
}

// Start connects a cuse.Server serving dev to a new fake kernel, performs
// CUSE_INIT and starts serving. Cleanup closes the server, then fails the
// test if Serve failed or the server violated the protocol.
func Start(t testing.TB, dev cuse.Device, opts *Options) *Kernel {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	cfg := opts.Config
	if cfg.DevName == "" {
		cfg.DevName = "cusetest"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	k := &Kernel{
		t:          t,
		mem:        opts.Memory,
		timeout:    opts.Timeout,
		serveErr:   make(chan error, 1),
		readDone:   make(chan struct{}),
		notes:      make(chan uint64, 1024),
		pending:    make(map[uint64]*Pending),
		answered:   make(map[uint64]bool),
		nextUnique: 2,
		nextKh:     1,
	}
	if k.mem == nil {
		k.mem = callermem.NewFake()
	}
	if k.timeout == 0 {
		k.timeout = DefaultTimeout
	}
	kernelEnd, serverEnd, err := socketpair()
	if err != nil {
		t.Fatalf("cusetest: %v", err)
	}
	k.conn = kernelEnd

	// Like the kernel, queue CUSE_INIT before the daemon reads anything.
	minor := opts.KernelMinor
	if minor == 0 {
		minor = wire.FUSE_KERNEL_MINOR_VERSION
	}
	in := wire.CuseInitIn{Major: wire.FUSE_KERNEL_VERSION, Minor: minor, Flags: wire.CUSE_UNRESTRICTED_IOCTL}
	if err := k.write(encode(OpCuseInit, 1, 0, cuse.Caller{Pid: 1}, in.Append(nil))); err != nil {
		t.Fatalf("cusetest: sending CUSE_INIT: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	srv, err := cuse.NewServer(ctx, serverEnd, cfg, dev)
	if err != nil {
		kernelEnd.Close()
		t.Fatalf("cusetest: %v", err)
	}
	k.srv = srv
	if err := k.readInit(); err != nil {
		srv.Close()
		kernelEnd.Close()
		t.Fatalf("cusetest: %v", err)
	}
	go func() { k.serveErr <- srv.Serve() }()
	go k.readLoop()
	t.Cleanup(k.close)
	return k
}

// testWriter sends the server's log to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimSuffix(p, []byte("\n")))
	return len(p), nil
}

func socketpair() (kernelEnd, serverEnd *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "cusetest-kernel"), os.NewFile(uintptr(fds[1]), "cusetest-channel"), nil
}

// readInit checks the CUSE_INIT reply as cuse_process_init_reply does.
func (k *Kernel) readInit() error {
	k.conn.SetReadDeadline(time.Now().Add(k.timeout))
	defer k.conn.SetReadDeadline(time.Time{})
	buf := make([]byte, 2*wire.CUSE_INIT_INFO_MAX)
	n, err := k.conn.Read(buf)
	if err != nil {
		return fmt.Errorf("reading the CUSE_INIT reply: %w", err)
	}
	msg := buf[:n]
	oh, err := wire.DecodeOutHeader(msg)
	if err != nil {
		return err
	}
	switch {
	case int(oh.Length) != n:
		return fmt.Errorf("CUSE_INIT reply: header length %d, message %d", oh.Length, n)
	case oh.Unique != 1 || oh.Status != 0:
		return fmt.Errorf("CUSE_INIT reply: unique %d, error %d", oh.Unique, oh.Status)
	}
	var out wire.CuseInitOut
	if err := out.Decode(msg[wire.SizeofOutHeader:]); err != nil {
		return err
	}
	if out.Major != wire.FUSE_KERNEL_VERSION || out.Minor < wire.CUSE_MIN_MINOR {
		return fmt.Errorf("CUSE_INIT reply: version %d.%d", out.Major, out.Minor)
	}
	info := msg[wire.SizeofOutHeader+wire.SizeofCuseInitOut:]
	if len(info) == 0 || len(info) > wire.CUSE_INIT_INFO_MAX || info[len(info)-1] != 0 {
		return fmt.Errorf("CUSE_INIT reply: info not properly terminated: %q", info)
	}
	for _, kv := range splitNUL(info) {
		if len(kv) > len("DEVNAME=") && kv[:len("DEVNAME=")] == "DEVNAME=" {
			k.DevName = kv[len("DEVNAME="):]
		}
	}
	if k.DevName == "" {
		return fmt.Errorf("CUSE_INIT reply: no DEVNAME in %q", info)
	}
	k.Init = InitReply{Major: out.Major, Minor: out.Minor, Flags: out.Flags, MaxRead: out.MaxRead,
		MaxWrite: out.MaxWrite, DevMajor: out.DevMajor, DevMinor: out.DevMinor}
	return nil
}

func splitNUL(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return out
}

// Server is the server under test.
func (k *Kernel) Server() *cuse.Server { return k.srv }

// Memory is the fake caller memory given in Options (or a fresh one).
func (k *Kernel) Memory() *callermem.Fake { return k.mem }

// Notifications delivers the kh of every FUSE_NOTIFY_POLL the server sent,
// in order.
func (k *Kernel) Notifications() <-chan uint64 { return k.notes }

// Violations lists the protocol violations seen so far; Cleanup reports
// them as test errors.
func (k *Kernel) Violations() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.violations...)
}

func (k *Kernel) violate(format string, args ...any) {
	k.mu.Lock()
	k.violations = append(k.violations, fmt.Sprintf(format, args...))
	k.mu.Unlock()
}

// Close shuts the server down (answering whatever is in flight) and waits
// for it. Cleanup does this; calling it earlier lets a test check shutdown.
// It returns what Serve returned.
func (k *Kernel) Close() error {
	if err := k.srv.Close(); err != nil {
		return err
	}
	return <-k.serveErr
}

func (k *Kernel) close() {
	k.closing.Store(true)
	err := k.srv.Close()
	select {
	case serveErr := <-k.serveErr:
		if err == nil && !errors.Is(serveErr, cuse.ErrServerClosed) {
			err = serveErr
		}
	default: // Close was called earlier and consumed it
	}
	if err != nil {
		k.t.Errorf("cusetest: server shutdown: %v", err)
	}
	k.resends.Wait()
	k.conn.Close()
	<-k.readDone
	for _, v := range k.Violations() {
		k.t.Errorf("cusetest: protocol violation: %s", v)
	}
}
