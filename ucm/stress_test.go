package ucm_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"golang.org/x/sys/unix"
)

// Sixteen goroutines on one file: four blocked in GET_EVENT, twelve
// creating, listening, connecting to themselves and destroying. Nothing
// may hang, every answer must be one the kernel could give, and close
// must leave no id behind.
func TestSixteenGoroutinesOneFile(t *testing.T) {
	d := fakedut.New(t, nil)
	c, err := conformance.NewClient(d, false)
	must(t, err)
	ff := fake(c)
	path, _ := d.LoopbackPath()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var (
		wg   sync.WaitGroup
		stop = make(chan struct{})
		got  atomic.Int64
		errs = make(chan error, 64)
		reqs atomic.Int64
	)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, gt := eventGet(c)
				p := ff.WriteAsync(b)
				select {
				case <-p.Done():
				case <-stop:
					d.Kernel.Interrupt(p.Unique)
					select {
					case <-p.Done():
					case <-ctx.Done():
						fail(fmt.Errorf("getter %d: interrupted GET_EVENT never answered", g))
						return
					}
				case <-ctx.Done():
					fail(fmt.Errorf("getter %d: GET_EVENT hung", g))
					return
				}
				r := p.Wait()
				if r.Errno == unix.EINTR {
					return
				}
				if r.Errno != 0 {
					fail(fmt.Errorf("getter %d: GET_EVENT: %v", g, r.Errno))
					return
				}
				got.Add(1)
				var ev abi.EventResp
				ev.Decode(c.Mem.Read(gt.Response, abi.EventRespSize))
				if ev.Event == abi.CMREQReceived {
					reqs.Add(1)
				}
			}
		}()
	}
	var workers sync.WaitGroup
	for w := range 12 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range 20 {
				if ctx.Err() != nil {
					fail(fmt.Errorf("worker %d: deadline", w))
					return
				}
				if err := churn(c, path, uint64(0x10000000+w*100+i)); err != nil {
					fail(fmt.Errorf("worker %d round %d: %w", w, i, err))
					return
				}
			}
		}()
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got.Load() == 0 || reqs.Load() == 0 {
		t.Errorf("%d events delivered, %d of them REQs: the getters were not exercised", got.Load(), reqs.Load())
	}
	must(t, c.Close())
	if n := d.IDs.Len(); n != 0 {
		t.Errorf("%d ids left after close", n)
	}
	// Every charge given back: a leak here would refuse the user later.
	if u := d.Device.Budget().Usage(); u.Bytes != 0 || u.Users != 0 {
		t.Errorf("after close the budget still has %d bytes charged to %d users: %+v", u.Bytes, u.Users, d.Device.Budget().Users())
	}
	if n, _ := d.Device.Budget().Copies(); n != 0 {
		t.Errorf("%d copies still in progress after close", n)
	}
}

// churn is one worker round: a listener and an active id on the same
// file, a REQ between them, then both destroyed. Errors the race with the
// getters and the CM can legitimately cause are tolerated; anything else
// (or a hang) is not.
func churn(c *conformance.Client, path abi.PathRec, sid uint64) error {
	l, err := c.CreateID(sid)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if err := c.Listen(l, sid, 0); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	a, err := c.CreateID(sid + 1)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if _, err := c.AttrID(a); err != nil {
		return fmt.Errorf("attr: %w", err)
	}
	if err := c.SendREQ(c.REQ(a, sid, path, uint32(sid))); err != nil {
		return fmt.Errorf("send REQ: %w", err)
	}
	// The REQ may or may not have been delivered yet: INIT is valid in
	// REQ_SENT, and REJ/timeouts may already have reset the id.
	if _, err := c.InitQPAttr(a, abi.QPStateInit); err != nil && conformance.Errno(err) != unix.EINVAL {
		return fmt.Errorf("init_qp_attr: %w", err)
	}
	for _, id := range []uint32{l, a} {
		if _, err := c.DestroyID(id); err != nil {
			return fmt.Errorf("destroy %d: %w", id, err)
		}
	}
	return nil
}
