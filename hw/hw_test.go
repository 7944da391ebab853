package hw

import "testing"

// PKeyIndex picks as ib_find_cached_pkey does: the first full member equal
// in the low 15 bits, else the last limited member, whatever membership
// the P_Key asked for has.
func TestPKeyIndex(t *testing.T) {
	a := PortAttr{PKeys: []uint16{0x7fff, 0x0001, 0xffff, 0x8001, 0x0002, 0x0002, 0x0000}}
	for _, tc := range []struct {
		pkey uint16
		want int
		ok   bool
	}{
		{0xffff, 2, true}, // the full member, though a limited one comes first
		{0x7fff, 2, true}, // asked as limited: the full member all the same
		{0x8002, 5, true}, // no full member: the last limited one
		{0x0001, 3, true}, // a full member after a limited one
		{0x1234, -1, false},
	} {
		if got, ok := a.PKeyIndex(tc.pkey); got != tc.want || ok != tc.ok {
			t.Errorf("PKeyIndex(%#04x) = %d, %v; want %d, %v", tc.pkey, got, ok, tc.want, tc.ok)
		}
	}
}

// GIDIndex takes the asked type, else the first entry with the GID; with no
// type asked it prefers RoCE v2, as rdma_cm does: mlx5 and bnxt_re list
// each address as RoCE v1 first.
func TestGIDIndex(t *testing.T) {
	g, h := GID{0xfe, 0x80, 15: 1}, GID{15: 7}
	a := PortAttr{GIDs: []GIDEntry{
		{Index: 0, GID: g, Type: GIDTypeRoCEv1},
		{Index: 1, GID: g, Type: GIDTypeRoCEv2},
		{Index: 4, GID: h, Type: GIDTypeRoCEv1},
	}}
	for _, tc := range []struct {
		gid  GID
		typ  GIDType
		want int
		ok   bool
	}{
		{g, 0, 1, true},
		{g, GIDTypeRoCEv1, 0, true},
		{g, GIDTypeRoCEv2, 1, true},
		{h, 0, 4, true},             // only RoCE v1 has it
		{h, GIDTypeRoCEv2, 4, true}, // the type asked is not there: the first
		{GID{1}, 0, -1, false},
	} {
		if got, ok := a.GIDIndex(tc.gid, tc.typ); got != tc.want || ok != tc.ok {
			t.Errorf("GIDIndex(%v, %v) = %d, %v; want %d, %v", tc.gid, tc.typ, got, ok, tc.want, tc.ok)
		}
	}
	ib := PortAttr{GIDs: []GIDEntry{{Index: 0, GID: h, Type: GIDTypeIB}, {Index: 3, GID: h, Type: GIDTypeIB}}}
	if got, ok := ib.GIDIndex(h, 0); got != 0 || !ok {
		t.Errorf("InfiniBand GIDIndex = %d, %v; want the first entry, 0", got, ok)
	}
}
