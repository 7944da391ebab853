// Command gofloor is make perf's Go floor (docs/perf.md, "The anchors"):
// ucmd's own CUSE server, package cuse with the runtime settings of ucmd
// serve, serving a device whose write does what cusefloor --pvw's does
// and nothing else. Between that libfuse3 floor and ucmd it splits the
// request path in two: what ucmd's server costs against libfuse's loop
// making the same copy, and what ucm's commands add on top.
//
//	gofloor DEVNAME
//
// DEVNAME is the node under /dev (e.g. infiniband/ucmgofloor). A write of
// at least 24 bytes (a CREATE_ID-shaped command) has the 4-byte id 1
// written to the response pointer at its byte 16 with one
// process_vm_writev, and is answered in full; a shorter one fails with
// EINVAL. The process serves until SIGTERM or SIGINT.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/internal/sysmon"
)

// floor is the device; its one file serves every open.
type floor struct{ mem callermem.Memory }

// Where a CREATE_ID-shaped write carries its response pointer, as
// cusefloor.c reads it.
const (
	minWrite   = 24
	respOffset = 16
)

func (d floor) Open(context.Context, cuse.Request, cuse.Waker) (cuse.Handle, error) { return d, nil }

func (d floor) Write(_ context.Context, req cuse.Request, data []byte) (int, error) {
	if len(data) < minWrite {
		return 0, unix.EINVAL
	}
	id := [4]byte{1}
	if err := d.mem.Write(req.Caller.Pid, binary.NativeEndian.Uint64(data[respOffset:]), id[:]); err != nil {
		return 0, err
	}
	return len(data), nil
}

func (floor) Read(context.Context, cuse.Request, []byte) (int, error) { return 0, unix.EINVAL }

func (floor) Poll(_ context.Context, _ cuse.Request, events uint32) (uint32, error) {
	return events & unix.POLLOUT, nil
}

func (floor) Release(context.Context) {}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gofloor DEVNAME")
		os.Exit(2)
	}
	if err := serve(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gofloor:", err)
		os.Exit(1)
	}
}

func serve(name string) error {
	if _, err := sysmon.SetSlack(sysmon.DefaultSlack); err != nil {
		// As ucmd serve: a warning, not a failure.
		fmt.Fprintln(os.Stderr, "gofloor: the runtime monitor keeps the kernel's timer slack:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
	defer stop()
	base := runtime.GOMAXPROCS(0)
	srv, err := cuse.Open(ctx, cuse.Config{DevName: name, IdleReaders: sysmon.IdleReaders(base)}, floor{mem: callermem.ProcessVM{}})
	if err != nil {
		return err
	}
	sysmon.SpareProcs(base, srv.MaxBlockedReaders())
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(); !errors.Is(err, cuse.ErrServerClosed) {
		return err
	}
	return nil
}
