package ucm

import (
	"context"
	"errors"
	"fmt"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"golang.org/x/sys/unix"
)

// createID is ib_ucm_create_id. The id becomes usable only when complete;
// if the response cannot be written the id is destroyed again and the
// caller gets EFAULT, as in the kernel.
func (c *call) createID(ctx context.Context, m *abi.CreateID) error {
	f := c.f
	// The CM id first: once linked into the file, x may be torn down by a
	// release (the server's shutdown after its grace, with this command
	// still running), which destroys x.cmID.
	x := &ucmCtx{file: f, uid: m.UID, cmID: f.d.cm.CreateID(f.d.handler)}
	x.cmID.SetContext(x)
	if err := f.addCtx(x); err != nil {
		x.cmID.Destroy()
		return err
	}
	f.d.ids.publish(x)
	(&abi.CreateIDResp{ID: x.id}).Encode(c.out[:])
	if err := c.respond(m.Response, abi.CreateIDRespSize); err != nil {
		if y, rerr := f.d.ids.remove(f, x.id); rerr == nil && y == x {
			// Another thread may have guessed the id already. If the
			// wait for it ends early (interrupt, release), the id goes
			// anyway: the answer is the copy's error (EFAULT; EINTR or
			// ENOMEM when the copy was interrupted or refused a slot),
			// whatever the wait does.
			_ = f.await(ctx, f.d.ids.unused(x))
			f.teardown(ctx, x)
		}
		return err
	}
	return nil
}

// destroyID is ib_ucm_destroy_id: take the id out of reach, wait for the
// commands using it, destroy the CM id (no event can follow), purge its
// events, and only then answer with the exact count of delivered events.
//
// The kernel's waits were uninterruptible; ours end on INTERRUPT. Before
// anything is destroyed (a command holding the id is stuck in a copy), the
// id is put back and the answer is EINTR: nothing happened, retry. Once the
// CM id is destroyed, the destroy completes (see purge) and answers.
func (c *call) destroyID(ctx context.Context, m *abi.DestroyID) error {
	x, err := c.f.d.ids.remove(c.f, m.ID)
	if err != nil {
		return err
	}
	if err := c.f.await(ctx, c.f.d.ids.unused(x)); err != nil {
		if errors.Is(err, errReleased) || !c.f.d.ids.restore(x) {
			return errReleased // close tears it down
		}
		return err
	}
	n := c.f.teardown(ctx, x)
	// As in the kernel, an EFAULT here still leaves the id destroyed.
	(&abi.DestroyIDResp{EventsReported: n}).Encode(c.out[:])
	err = c.respond(m.Response, abi.DestroyIDRespSize)
	if err != nil && !errors.Is(err, unix.EFAULT) {
		// Interrupted while waiting to copy (copySlots), or refused the
		// wait (beginWait), the id already destroyed: EINTR or ENOMEM
		// would say that nothing happened. The answer is the kernel's
		// for a response it could not write.
		return fmt.Errorf("%w: %w", unix.EFAULT, err)
	}
	return err
}

// attrID is ib_ucm_attr_id.
func (c *call) attrID(_ context.Context, m *abi.AttrID) error {
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	a := x.cmID.Attr()
	(&abi.AttrIDResp{
		ServiceID: a.ServiceID, ServiceMask: a.ServiceMask,
		LocalID: a.LocalCommID, RemoteID: a.RemoteCommID,
	}).Encode(c.out[:])
	return c.respond(m.Response, abi.AttrIDRespSize)
}

// initQPAttr is ib_ucm_init_qp_attr.
func (c *call) initQPAttr(_ context.Context, m *abi.InitQPAttr) error {
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	if m.QPState > 0xff {
		return fmt.Errorf("QP state %d: %w", m.QPState, unix.EINVAL)
	}
	a, mask, err := x.cmID.InitQPAttr(uint8(m.QPState))
	if err != nil {
		return err
	}
	resp := qpAttrToABI(&a, mask, m.QPState)
	resp.Encode(c.out[:])
	return c.respond(m.Response, abi.QPAttrSize)
}

// Service IDs ucm refused to listen on: the RDMA CM's and SDP's ranges
// (IB_CMA_SERVICE_ID, IB_SDP_SERVICE_ID and their masks).
const (
	cmaServiceID     uint64 = 0x0000000001000000
	cmaServiceIDMask uint64 = 0xFFFFFFFFFF000000
	sdpServiceID     uint64 = 0x0000000000010000
	sdpServiceIDMask uint64 = 0xFFFFFFFFFFFF0000
)

// validateListen is ucm_validate_listen. It applies the mask as given, so
// mask 0 (an exact match for the CM) passes whatever the id: a kernel
// quirk kept for fidelity.
func validateListen(sid, mask uint64) error {
	sid &= mask
	if sid&cmaServiceIDMask == cmaServiceID || sid&sdpServiceIDMask == sdpServiceID {
		return fmt.Errorf("service id %#x/%#x is in the RDMA CM or SDP range: %w", sid, mask, unix.EINVAL)
	}
	return nil
}

// listen is ib_ucm_listen: id lookup first, then the range check.
func (c *call) listen(_ context.Context, m *abi.Listen) error {
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	if err := validateListen(m.ServiceID, m.ServiceMask); err != nil {
		return err
	}
	return x.cmID.Listen(m.ServiceID, m.ServiceMask)
}

// notify is ib_ucm_notify.
func (c *call) notify(_ context.Context, m *abi.Notify) error {
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	return x.cmID.Notify(cmcore.NotifyEvent(m.Event))
}
