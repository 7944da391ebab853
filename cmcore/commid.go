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
	byID    index // keyLocalID: by wire value
}

func newCommIDs(operand uint32) commIDs {
	return commIDs{operand: operand, byID: newIndex(keyLocalID)}
}

// alloc gives id a fresh wire ID (id.localID). Zero is never used: a zero
// comm ID means "not yet known" in REJ and MRA lookups.
func (c *commIDs) alloc(id *ID) {
	for {
		v := c.next ^ c.operand
		c.next++
		if v == 0 || c.byID.get(idKey{v, 0}) != nil {
			continue
		}
		id.localID = v
		c.byID.insert(id)
		return
	}
}

// lookup returns the id owning wire ID v, or nil.
func (c *commIDs) lookup(v uint32) *ID { return c.byID.get(idKey{v, 0}) }

// release frees id's wire ID.
func (c *commIDs) release(id *ID) { c.byID.remove(id) }
