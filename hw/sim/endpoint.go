package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ucmd/ucmd/hw"
)

// CM class constants the KernelCM emulation needs.
const (
	mgmtClassCM       = 0x07
	cmClassVersion    = 2
	methodSend        = 0x03
	maxMethods        = 128 // the kernel's method mask has 128 bits
	maxMgmtVersion    = 8   // the MAD layer's MAX_MGMT_VERSION
	responseMethodBit = 0x80
)

type endpoint struct {
	port    *Port
	class   uint8
	version uint8
	methods [maxMethods / 64]uint64
	hiTID   uint32
	q       chan hw.Received
	inline  chan hw.Received // after Deliver, what arrives; guarded by the fabric's lock
	fail    chan error       // the next Recv returns this (FailReceive)
	done    chan struct{}
	closed  bool // guarded by the fabric's lock
}

var _ hw.Endpoint = (*endpoint)(nil)

func (e *endpoint) hasMethod(m uint8) bool {
	return m < maxMethods && e.methods[m/64]&(1<<(m%64)) != 0
}

// accepts reports whether mad is for this endpoint. As in the kernel's MAD
// layer, requests match the registration and responses go to the agent
// whose id is in the upper half of the TID.
func (e *endpoint) accepts(mad *hw.MAD) bool {
	if mad[3]&responseMethodBit != 0 {
		return binary.BigEndian.Uint32(mad[8:12]) == e.hiTID && mad[1] == e.class
	}
	return mad[1] == e.class && mad[2] == e.version && e.hasMethod(mad[3])
}

// OpenMAD registers an endpoint on the port. Like the kernel's MAD layer it
// refuses a method another endpoint already owns for the same class and
// class version; for the CM class the error wraps hw.ErrCMClassInUse.
func (p *Port) OpenMAD(reg hw.Registration) (hw.Endpoint, error) {
	f := p.dev.fabric
	e := &endpoint{
		port:    p,
		class:   reg.MgmtClass,
		version: reg.ClassVersion,
		q:       make(chan hw.Received, f.queueLen),
		fail:    make(chan error, 1),
		done:    make(chan struct{}),
	}
	if reg.MgmtClass == 0 {
		return nil, einval("%s: register class 0: invalid management class", p)
	}
	if reg.ClassVersion >= maxMgmtVersion {
		return nil, einval("%s: register class %#x: class version %d out of range", p, reg.MgmtClass, reg.ClassVersion)
	}
	for _, m := range reg.Methods {
		if m >= maxMethods {
			return nil, einval("%s: register class %#x: method %#x is not a request method", p, reg.MgmtClass, m)
		}
		e.methods[m/64] |= 1 << (m % 64)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.dev.goneErr != nil {
		return nil, p.dev.goneErr
	}
	if p.kernelCM && reg.MgmtClass == mgmtClassCM && reg.ClassVersion == cmClassVersion && e.hasMethod(methodSend) {
		return nil, inUse(p, reg, methodSend, "the kernel's ib_cm")
	}
	for _, o := range p.eps {
		if o.class != e.class || o.version != e.version {
			continue
		}
		for _, m := range reg.Methods {
			if o.hasMethod(m) {
				return nil, inUse(p, reg, m, "another endpoint")
			}
		}
	}
	f.nextAgent++
	e.hiTID = f.nextAgent
	p.eps = append(p.eps, e)
	if f.deliver {
		return &deliverer{endpoint: e}, nil
	}
	return e, nil
}

// deliverer is an endpoint of a Config.Deliver fabric.
type deliverer struct {
	*endpoint
	once sync.Once
}

var _ hw.Deliverer = (*deliverer)(nil)

// scribble is what a delivered MAD's buffer holds once the call returns.
const scribble = 0xEE

// Deliver implements hw.Deliverer.
func (d *deliverer) Deliver(fn func(r *hw.Received)) {
	d.once.Do(func() {
		f := d.port.dev.fabric
		in := make(chan hw.Received, cap(d.q))
		f.mu.Lock()
		d.inline = in
		f.mu.Unlock()
		go func() {
			var buf hw.Received // one buffer, as umad's reader reuses its own
			for {
				select {
				case r := <-in:
					buf = r
					fn(&buf)
					for i := range buf.MAD {
						buf.MAD[i] = scribble
					}
					buf.Src = hw.Address{}
				case <-d.done:
					return
				}
			}
		}()
	})
}

func inUse(p *Port, reg hw.Registration, m uint8, owner string) error {
	if reg.MgmtClass == mgmtClassCM {
		return fmt.Errorf("sim: %s: register class %#x version %d: method %#x already in use by %s: %w (%w)",
			p, reg.MgmtClass, reg.ClassVersion, m, owner, hw.ErrCMClassInUse, syscall.EINVAL)
	}
	return einval("%s: register class %#x version %d: method %#x already in use by %s", p, reg.MgmtClass, reg.ClassVersion, m, owner)
}

// Send never blocks unless the Resolve or SendBlock knob is set.
func (e *endpoint) Send(ctx context.Context, dst hw.Address, mad *hw.MAD) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := e.resolve(ctx, &dst); err != nil {
		return err
	}
	f := e.port.dev.fabric
	if block := time.Duration(f.sendBlock.Load()); block > 0 {
		ch := make(chan struct{})
		t := f.clk.AfterFunc(block, func() { close(ch) })
		select {
		case <-ch:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-e.done:
			t.Stop()
			return hw.ErrClosed
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.closed {
		return hw.ErrClosed
	}
	if err := e.port.dev.goneErr; err != nil {
		return err
	}
	return f.send(e, &dst, mad)
}

func (e *endpoint) Recv(ctx context.Context) (hw.Received, error) {
	select {
	case <-e.done:
		return hw.Received{}, hw.ErrClosed
	default:
	}
	// What is queued comes first, then a failure, as umad's reads return
	// the MADs its queue holds before the error of a removed device: a
	// select over both would pick at random, and a seed would not replay.
	select {
	case r := <-e.q:
		return r, nil
	default:
	}
	if err := e.failed(); err != nil {
		return hw.Received{}, err
	}
	select {
	case r := <-e.q:
		return r, nil
	case err := <-e.fail:
		return e.queuedFirst(err)
	case <-e.port.dev.gone:
		return e.queuedFirst(e.port.dev.goneErr)
	case <-ctx.Done():
		return hw.Received{}, ctx.Err()
	case <-e.done:
		return hw.Received{}, hw.ErrClosed
	}
}

// failed takes a pending failure: FailReceive's, or the device's removal.
func (e *endpoint) failed() error {
	select {
	case err := <-e.fail:
		return err
	case <-e.port.dev.gone:
		return e.port.dev.goneErr
	default:
		return nil
	}
}

// queuedFirst returns a MAD queued while Recv woke for err, keeping err
// for the next Recv, or else err.
func (e *endpoint) queuedFirst(err error) (hw.Received, error) {
	select {
	case r := <-e.q:
		if !e.port.dev.removed() {
			select {
			case e.fail <- err:
			default:
			}
		}
		return r, nil
	default:
		return hw.Received{}, err
	}
}

// FailReceive makes the next Recv of every endpoint open on p return err,
// as a removed device's umad file fails its reads (EIO).
func (p *Port) FailReceive(err error) {
	f := p.dev.fabric
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range p.eps {
		select {
		case e.fail <- err:
		default: // one failure pending is enough
		}
	}
}

// Close unregisters the endpoint and wakes blocked Recv and Send calls.
func (e *endpoint) Close() error {
	f := e.port.dev.fabric
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.closed {
		return hw.ErrClosed
	}
	e.closed = true
	p := e.port
	p.eps = slices.DeleteFunc(p.eps, func(o *endpoint) bool { return o == e })
	close(e.done)
	return nil
}
