package cmcore

// commIDs allocates local communication IDs the way cm.c does: a cyclic
// counter (a freed ID is not handed out again until the counter wraps) whose
// value is XORed with a per-instance random operand, so IDs are not
// predictable across restarts. The wire value is the XOR result. IDs still
// present in the table (live, or destroyed but in timewait) are skipped, so an
// ID is never reused before its timewait ends. Guarded by CM.mu.
type commIDs struct {
	next    uint32
	operand uint32
	byID    map[uint32]*ID // wire value → id
}

func newCommIDs(operand uint32) commIDs {
	return commIDs{operand: operand, byID: make(map[uint32]*ID)}
}

// alloc assigns a fresh wire ID to id. Zero is never used: a zero comm ID
// means "not yet known" in REJ and MRA lookups.
func (c *commIDs) alloc(id *ID) uint32 {
	for {
		v := c.next ^ c.operand
		c.next++
		if v == 0 {
			continue
		}
		if _, used := c.byID[v]; used {
			continue
		}
		c.byID[v] = id
		return v
	}
}

// lookup returns the id owning wire ID v, or nil.
func (c *commIDs) lookup(v uint32) *ID { return c.byID[v] }

func (c *commIDs) release(v uint32) { delete(c.byID, v) }
