package wire

import "testing"

func TestAttrName(t *testing.T) {
	for id, want := range map[uint16]string{
		AttrREQ: "REQ", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP", AttrAPR: "APR",
		AttrClassPortInfo: "ClassPortInfo", 0x0042: "attr 0x0042",
	} {
		if got := AttrName(id); got != want {
			t.Errorf("AttrName(%#x) = %q, want %q", id, got, want)
		}
	}
}
