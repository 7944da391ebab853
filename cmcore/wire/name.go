package wire

import "fmt"

var attrNames = map[uint16]string{
	AttrClassPortInfo: "ClassPortInfo",
	AttrREQ:           "REQ",
	AttrMRA:           "MRA",
	AttrREJ:           "REJ",
	AttrREP:           "REP",
	AttrRTU:           "RTU",
	AttrDREQ:          "DREQ",
	AttrDREP:          "DREP",
	AttrSIDRREQ:       "SIDR_REQ",
	AttrSIDRREP:       "SIDR_REP",
	AttrLAP:           "LAP",
	AttrAPR:           "APR",
}

// AttrName names a CM attribute as the IB specification spells the
// message (REQ, SIDR_REQ; ClassPortInfo), or "attr 0x00NN" for another.
func AttrName(id uint16) string {
	if n, ok := attrNames[id]; ok {
		return n
	}
	return fmt.Sprintf("attr 0x%04x", id)
}
