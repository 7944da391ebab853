package abi

// Sizes of the command responses.
const (
	CreateIDRespSize  = 4
	DestroyIDRespSize = 4
	AttrIDRespSize    = 24
)

// CreateIDResp is struct ib_ucm_create_id_resp.
type CreateIDResp struct {
	ID uint32 // @0
}

func (*CreateIDResp) Size() int { return CreateIDRespSize }

func (r *CreateIDResp) Encode(b []byte) {
	b = fit(b, CreateIDRespSize)
	ne.PutUint32(b[0:], r.ID)
}

func (r *CreateIDResp) Decode(b []byte) {
	var w [CreateIDRespSize]byte
	copy(w[:], b)
	r.ID = ne.Uint32(w[0:])
}

// DestroyIDResp is struct ib_ucm_destroy_id_resp.
type DestroyIDResp struct {
	// EventsReported counts the events GET_EVENT delivered for the id
	// (REQ events count on their listener); libibcm waits for as many acks.
	EventsReported uint32 // @0
}

func (*DestroyIDResp) Size() int { return DestroyIDRespSize }

func (r *DestroyIDResp) Encode(b []byte) {
	b = fit(b, DestroyIDRespSize)
	ne.PutUint32(b[0:], r.EventsReported)
}

func (r *DestroyIDResp) Decode(b []byte) {
	var w [DestroyIDRespSize]byte
	copy(w[:], b)
	r.EventsReported = ne.Uint32(w[0:])
}

// AttrIDResp is struct ib_ucm_attr_id_resp. All fields are big-endian.
type AttrIDResp struct {
	ServiceID   uint64 // @0 __be64
	ServiceMask uint64 // @8 __be64
	LocalID     uint32 // @16 __be32 local communication id
	RemoteID    uint32 // @20 __be32 remote communication id
}

func (*AttrIDResp) Size() int { return AttrIDRespSize }

func (r *AttrIDResp) Encode(b []byte) {
	b = fit(b, AttrIDRespSize)
	be.PutUint64(b[0:], r.ServiceID)
	be.PutUint64(b[8:], r.ServiceMask)
	be.PutUint32(b[16:], r.LocalID)
	be.PutUint32(b[20:], r.RemoteID)
}

func (r *AttrIDResp) Decode(b []byte) {
	var w [AttrIDRespSize]byte
	copy(w[:], b)
	r.ServiceID = be.Uint64(w[0:])
	r.ServiceMask = be.Uint64(w[8:])
	r.LocalID = be.Uint32(w[16:])
	r.RemoteID = be.Uint32(w[20:])
}
