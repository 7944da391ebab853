package abi

// Private-data and info limits of the IB CM messages (<rdma/ib_cm.h>): the CM
// fails a send whose len, data_len or info_len exceeds them with EINVAL, and
// every received message with private data delivers exactly its area's size
// (CMEvent.PrivateDataLen). The largest, 224, fits libibcm's 255-byte event
// buffers.
const (
	MaxREQPrivateData     = 92  // IB_CM_REQ_PRIVATE_DATA_SIZE
	MaxMRAPrivateData     = 222 // IB_CM_MRA_PRIVATE_DATA_SIZE
	MaxREJPrivateData     = 148 // IB_CM_REJ_PRIVATE_DATA_SIZE
	MaxREPPrivateData     = 196 // IB_CM_REP_PRIVATE_DATA_SIZE
	MaxRTUPrivateData     = 224 // IB_CM_RTU_PRIVATE_DATA_SIZE
	MaxDREQPrivateData    = 220 // IB_CM_DREQ_PRIVATE_DATA_SIZE
	MaxDREPPrivateData    = 224 // IB_CM_DREP_PRIVATE_DATA_SIZE
	MaxLAPPrivateData     = 168 // IB_CM_LAP_PRIVATE_DATA_SIZE
	MaxAPRPrivateData     = 148 // IB_CM_APR_PRIVATE_DATA_SIZE
	MaxSIDRREQPrivateData = 216 // IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE
	MaxSIDRREPPrivateData = 136 // IB_CM_SIDR_REP_PRIVATE_DATA_SIZE

	MaxREJARI      = 72 // IB_CM_REJ_ARI_LENGTH
	MaxAPRInfo     = 72 // IB_CM_APR_INFO_LENGTH
	MaxSIDRREPInfo = 72 // IB_CM_SIDR_REP_INFO_LENGTH
)
