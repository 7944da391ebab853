package cmcore

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// listenTable holds the listening ids of one CM (one device: listeners span
// all ports of an HCA). Guarded by CM.mu.
type listenTable struct {
	ids       []*ID
	nextAssgn uint64 // next IB_CM_ASSIGN_SERVICE_ID value to hand out
}

// add registers id for (sid, mask) after the checks of ib_cm_listen:
// mask 0 means exact match, sid is pre-masked, the 0x02 agnostic range is
// reserved for ASSIGN, and overlapping listeners get EBUSY. As in the
// kernel, an ASSIGN takes the next value whether or not it is free (a
// listener whose mask covers it makes the LISTEN fail with EBUSY and the
// value is spent), and the id keeps the service ID and mask it asked for
// even when refused (ATTR_ID shows them).
func (t *listenTable) add(id *ID, sid, mask uint64) error {
	if mask == 0 {
		mask = ^uint64(0)
	}
	sid &= mask
	if sid&ServiceIDAgnMask == AssignServiceID {
		if sid != AssignServiceID {
			return fmt.Errorf("cmcore: listen on %#x: service ID in the CM-assigned range: %w", sid, unix.EINVAL)
		}
		if t.nextAssgn == 0 {
			t.nextAssgn = AssignServiceID
		}
		sid, mask = t.nextAssgn, ^uint64(0)
		t.nextAssgn++
	}
	id.serviceID, id.serviceMask = sid, mask
	if cur := t.conflict(sid, mask); cur != nil {
		return fmt.Errorf("cmcore: listen on %#x/%#x overlaps listener %#x/%#x: %w",
			sid, mask, cur.serviceID, cur.serviceMask, unix.EBUSY)
	}
	t.ids = append(t.ids, id)
	return nil
}

// conflict is cm.c's insert rule: (cur.mask & new.sid) == (new.mask & cur.sid).
func (t *listenTable) conflict(sid, mask uint64) *ID {
	for _, cur := range t.ids {
		if cur.serviceMask&sid == mask&cur.serviceID {
			return cur
		}
	}
	return nil
}

// find returns the listener for an incoming service ID.
func (t *listenTable) find(sid uint64) *ID {
	for _, cur := range t.ids {
		if cur.serviceMask&sid == cur.serviceID {
			return cur
		}
	}
	return nil
}

func (t *listenTable) remove(id *ID) {
	for i, cur := range t.ids {
		if cur == id {
			// slices.Delete zeroes the freed slot: a destroyed listener
			// must not stay reachable (with its ucm file) from the array.
			t.ids = slices.Delete(t.ids, i, i+1)
			return
		}
	}
}
