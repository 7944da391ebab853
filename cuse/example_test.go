package cuse_test

import (
	"context"
	"log"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
)

// mailbox is a device whose files hold one message: a write stores it, a
// read takes it and blocks while the box is empty, and poll reports POLLIN
// when a message waits.
type mailbox struct{}

func (mailbox) Open(ctx context.Context, req cuse.Request, w cuse.Waker) (cuse.Handle, error) {
	return &box{wake: w, full: make(chan struct{})}, nil
}

type box struct {
	wake cuse.Waker
	mu   sync.Mutex
	msg  []byte
	full chan struct{} // closed while msg is set
}

func (b *box) Write(ctx context.Context, req cuse.Request, data []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.msg != nil {
		return 0, unix.EBUSY
	}
	b.msg = append([]byte(nil), data...) // data is only valid during Write
	close(b.full)
	b.wake.Wake() // a poller waiting for POLLIN may go on
	return len(data), nil
}

func (b *box) Read(ctx context.Context, req cuse.Request, dst []byte) (int, error) {
	for {
		b.mu.Lock()
		if b.msg != nil {
			n := copy(dst, b.msg)
			b.msg, b.full = nil, make(chan struct{})
			b.mu.Unlock()
			return n, nil
		}
		full := b.full
		b.mu.Unlock()
		if req.Nonblock() {
			return 0, unix.EAGAIN
		}
		select {
		case <-full:
		case <-ctx.Done(): // a signal: the client's read(2) fails with EINTR
			return 0, ctx.Err()
		}
	}
}

func (b *box) Poll(ctx context.Context, req cuse.Request, events uint32) (uint32, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	revents := uint32(unix.POLLOUT)
	if b.msg != nil {
		revents = unix.POLLIN
	}
	return revents & events, nil
}

func (b *box) Release(ctx context.Context) {}

// Registering /dev/mailbox and serving it until SIGTERM. Tests drive the
// same device through package cusetest instead of /dev/cuse.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM)
	defer stop()

	srv, err := cuse.Open(ctx, cuse.Config{DevName: "mailbox"}, mailbox{})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(); err != cuse.ErrServerClosed {
		log.Fatal(err)
	}
}
