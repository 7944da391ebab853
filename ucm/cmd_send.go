package ucm

import (
	"context"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
)

// The SEND_* commands copy their side buffers before looking the id up,
// as the kernel did: a bad pointer is EFAULT even with a bad id.

// sendREQ is ib_ucm_send_req: data, primary path, alternate path, id.
func (c *call) sendREQ(_ context.Context, m *abi.REQ) error {
	pd, err := c.data(m.Data, m.Len, "private data")
	if err != nil {
		return err
	}
	primary, err := c.path(m.PrimaryPath, "primary path")
	if err != nil {
		return err
	}
	alternate, err := c.path(m.AlternatePath, "alternate path")
	if err != nil {
		return err
	}
	p := &cmcore.REQParams{
		ServiceID:               m.SID,
		QPN:                     m.QPN,
		QPType:                  cmcore.QPType(m.QPType),
		StartingPSN:             m.PSN,
		ResponderResources:      m.ResponderResources,
		InitiatorDepth:          m.InitiatorDepth,
		RemoteCMResponseTimeout: m.RemoteCMResponseTimeout,
		LocalCMResponseTimeout:  m.LocalCMResponseTimeout,
		FlowControl:             m.FlowControl&1 != 0, // a one-bit field: the kernel kept the low bit
		RetryCount:              m.RetryCount,
		RNRRetryCount:           m.RNRRetryCount,
		MaxCMRetries:            m.MaxCMRetries,
		SRQ:                     m.SRQ&1 != 0,
		PeerToPeer:              m.PeerToPeer != 0,
		PrivateData:             pd,
	}
	if m.QPType > 0xff {
		p.QPType = 0 // not a type the CM knows: EINVAL there
	}
	if primary != nil {
		p.Primary = pathFromABI(primary)
	}
	if alternate != nil {
		p.Alternate = pathFromABI(alternate)
	}
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	var start int64
	if c.f.d.obs != nil {
		start = setupStamp()
	}
	if err := x.cmID.SendREQ(p); err != nil {
		return err
	}
	c.f.d.setupBegins(x, start)
	return nil
}

// sendREP is ib_ucm_send_rep. It sets the id's uid before the CM call,
// success or not: that is how a new connection gets its cookie.
func (c *call) sendREP(_ context.Context, m *abi.REP) error {
	pd, err := c.data(m.Data, m.Len, "private data")
	if err != nil {
		return err
	}
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	c.f.mu.Lock()
	x.uid = m.UID
	c.f.mu.Unlock()
	return x.cmID.SendREP(&cmcore.REPParams{
		QPN:                m.QPN,
		StartingPSN:        m.PSN,
		ResponderResources: m.ResponderResources,
		InitiatorDepth:     m.InitiatorDepth,
		FailoverAccepted:   m.FailoverAccepted,
		FlowControl:        m.FlowControl&1 != 0, // one-bit fields, as in SEND_REQ
		RNRRetryCount:      m.RNRRetryCount,
		SRQ:                m.SRQ&1 != 0,
		PrivateData:        pd,
	})
}

// sendPrivateData is ib_ucm_send_private_data: SEND_RTU, SEND_DREQ and
// SEND_DREP, each with its CM call; establishes marks SEND_RTU, after which
// the active side is ESTABLISHED.
func sendPrivateData(send func(id *cmcore.ID, pd []byte) error, establishes bool) func(*call, context.Context, *abi.PrivateData) error {
	return func(c *call, _ context.Context, m *abi.PrivateData) error {
		pd, err := c.data(m.Data, m.Len, "private data")
		if err != nil {
			return err
		}
		x, err := c.f.d.ids.get(c.f, m.ID)
		if err != nil {
			return err
		}
		defer x.put()
		if err := send(x.cmID, pd); err != nil {
			return err
		}
		if establishes {
			c.f.d.setupDone(x)
		}
		return nil
	}
}

// sendInfo is ib_ucm_send_info: SEND_REJ and SEND_APR (sendREJ, sendAPR),
// data before info.
func sendInfo(send func(id *cmcore.ID, status uint32, info, pd []byte) error) func(*call, context.Context, *abi.Info) error {
	return func(c *call, _ context.Context, m *abi.Info) error {
		pd, err := c.data(m.Data, m.DataLen, "private data")
		if err != nil {
			return err
		}
		info, err := c.data(m.Info, m.InfoLen, "info")
		if err != nil {
			return err
		}
		x, err := c.f.d.ids.get(c.f, m.ID)
		if err != nil {
			return err
		}
		defer x.put()
		return send(x.cmID, m.Status, info, pd)
	}
}

// sendREJ: the kernel passed the u32 status as an int to a u16 reason.
func sendREJ(id *cmcore.ID, status uint32, ari, pd []byte) error {
	return id.SendREJ(uint16(status), ari, pd)
}

// sendAPR: the kernel passed the u32 status as an int to a u8 status.
func sendAPR(id *cmcore.ID, status uint32, info, pd []byte) error {
	return id.SendAPR(uint8(status), info, pd)
}

// sendMRA is ib_ucm_send_mra.
func (c *call) sendMRA(_ context.Context, m *abi.MRA) error {
	pd, err := c.data(m.Data, m.Len, "private data")
	if err != nil {
		return err
	}
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	return x.cmID.SendMRA(m.Timeout, pd)
}

// sendLAP is ib_ucm_send_lap: data, then the alternate path.
func (c *call) sendLAP(_ context.Context, m *abi.LAP) error {
	pd, err := c.data(m.Data, m.Len, "private data")
	if err != nil {
		return err
	}
	path, err := c.path(m.Path, "alternate path")
	if err != nil {
		return err
	}
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	var alt *cmcore.PathRecord
	if path != nil {
		alt = pathFromABI(path)
	}
	return x.cmID.SendLAP(alt, pd)
}

// sendSIDRREQ is ib_ucm_send_sidr_req: data, then the path (required by
// the CM: EINVAL without). reserved_pkey is ignored since 2006.
func (c *call) sendSIDRREQ(_ context.Context, m *abi.SIDRREQ) error {
	pd, err := c.data(m.Data, m.Len, "private data")
	if err != nil {
		return err
	}
	path, err := c.path(m.Path, "path")
	if err != nil {
		return err
	}
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	p := &cmcore.SIDRREQParams{
		ServiceID:    m.SID,
		TimeoutMs:    m.Timeout,
		MaxCMRetries: m.MaxCMRetries,
		PrivateData:  pd,
	}
	if path != nil {
		p.Path = pathFromABI(path)
	}
	return x.cmID.SendSIDRREQ(p)
}

// sendSIDRREP is ib_ucm_send_sidr_rep: data, then info.
func (c *call) sendSIDRREP(_ context.Context, m *abi.SIDRREP) error {
	pd, err := c.data(m.Data, m.DataLen, "private data")
	if err != nil {
		return err
	}
	info, err := c.data(m.Info, m.InfoLen, "info")
	if err != nil {
		return err
	}
	x, err := c.f.d.ids.get(c.f, m.ID)
	if err != nil {
		return err
	}
	defer x.put()
	return x.cmID.SendSIDRREP(&cmcore.SIDRREPParams{
		Status: uint8(m.Status), QPN: m.QPN, QKey: m.QKey, Info: info, PrivateData: pd,
	})
}
