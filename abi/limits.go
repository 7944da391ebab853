package abi

// Private-data and info limits of the IB CM messages (IB_CM_*_PRIVATE_DATA_SIZE
// and friends in <rdma/ib_cm.h>): the CM fails a send whose len, data_len or
// info_len exceeds them with EINVAL, and delivers exactly the private-data
// size of the received message with every event that has private data.
// The largest, 224, fits libibcm's 255-byte event buffers.
const (
	ReqPrivateDataSize     = 92
	MRAPrivateDataSize     = 222
	RejPrivateDataSize     = 148
	RepPrivateDataSize     = 196
	RTUPrivateDataSize     = 224
	DReqPrivateDataSize    = 220
	DRepPrivateDataSize    = 224
	LAPPrivateDataSize     = 168
	APRPrivateDataSize     = 148
	SIDRReqPrivateDataSize = 216
	SIDRRepPrivateDataSize = 136

	RejARILength      = 72 // IB_CM_REJ_ARI_LENGTH
	APRInfoLength     = 72 // IB_CM_APR_INFO_LENGTH
	SIDRRepInfoLength = 72 // IB_CM_SIDR_REP_INFO_LENGTH
)
