package conformance

import (
	"bytes"
	"fmt"
	"time"

	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// eventCases are GET_EVENT and poll (§3.2 EVENT, poll()).
func eventCases() []Case {
	return []Case{
		{Name: "get_event/eagain-nonblock", Spec: "ucm-abi.md §3.2: no event and O_NONBLOCK → EAGAIN", run: func(e *env) error {
			c, err := e.NonblockClient()
			if err != nil {
				return err
			}
			_, err = c.GetEvent()
			return expect(err, unix.EAGAIN)
		}},
		{Name: "get_event/eagain-after-fcntl", Spec: "ucm-abi.md §3.2: O_NONBLOCK set later with fcntl counts too", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			if err := c.F.SetNonblock(true); err != nil {
				return err
			}
			_, err = c.GetEvent()
			return expect(err, unix.EAGAIN)
		}},
		{Name: "poll/empty", Spec: "ucm-abi.md §3.2 poll: not readable without events", run: func(e *env) error {
			c, err := e.Client()
			if err != nil {
				return err
			}
			ok, err := c.F.WaitReadable(0)
			if err != nil {
				return err
			}
			if ok {
				return fmt.Errorf("readable without events")
			}
			return nil
		}},
		{Name: "get_event/req", Spec: "ucm-abi.md §3.3: REQ is queued on the listener (its uid) and names a new id; poll readable", run: func(e *env) error {
			p, err := pairWithREQ(e)
			if err != nil {
				return err
			}
			ev, err := p.Passive.GetEvent()
			if err != nil {
				return check("GET_EVENT", err)
			}
			r := ev.U.REQ()
			switch {
			case ev.Event != abi.CMREQReceived:
				return fmt.Errorf("event %v", ev.Event)
			case ev.UID != listenUID:
				return fmt.Errorf("uid %#x, want the listener's %#x", ev.UID, listenUID)
			case ev.ID == p.Listener:
				return fmt.Errorf("REQ names the listener's id %d, not a new one", ev.ID)
			case ev.Present != abi.PresPrimary|abi.PresData:
				return fmt.Errorf("present %v, want PRIMARY|DATA", ev.Present)
			case len(ev.Data) != abi.MaxREQPrivateData || !bytes.HasPrefix(ev.Data, []byte("hello")):
				return fmt.Errorf("data %q", ev.Data)
			case r.RemoteQPN != activeQPN || r.StartingPSN != activePSN || r.QPType != abi.QPTypeRC:
				return fmt.Errorf("req %+v", r)
			case r.PrimaryPath.DLID != p.Path.SLID:
				return fmt.Errorf("primary path %+v", r.PrimaryPath)
			case r.ResponderResources != reqInitiatorDepth || r.InitiatorDepth != reqResponderResources:
				return fmt.Errorf("responder resources %d, initiator depth %d: want the REQ's %d and %d swapped",
					r.ResponderResources, r.InitiatorDepth, reqResponderResources, reqInitiatorDepth)
			case r.LocalCMResponseTimeout != reqRemoteTimeout || r.RemoteCMResponseTimeout != reqLocalTimeout:
				return fmt.Errorf("local CM response timeout %d, remote %d: want the REQ's remote %d and local %d swapped",
					r.LocalCMResponseTimeout, r.RemoteCMResponseTimeout, reqRemoteTimeout, reqLocalTimeout)
			}
			if _, err := p.Passive.AttrID(ev.ID); err != nil {
				return check("ATTR_ID of the new id", err)
			}
			return nil
		}},
		{Name: "get_event/blocks-until-event", Spec: "ucm-abi.md §3.2: a blocking GET_EVENT sleeps until an event is queued", run: func(e *env) error {
			p, err := newPair(e)
			if err != nil {
				return err
			}
			type result struct {
				ev  Event
				err error
			}
			done := make(chan result, 1)
			go func() {
				ev, err := p.Passive.GetEvent()
				done <- result{ev, err}
			}()
			time.Sleep(20 * time.Millisecond)
			select {
			case r := <-done:
				return fmt.Errorf("GET_EVENT returned before any event: %v %v", r.ev.Event, r.err)
			default:
			}
			if err := p.SendREQ(nil); err != nil {
				return err
			}
			select {
			case r := <-done:
				if r.err != nil {
					return check("GET_EVENT", r.err)
				}
				if r.ev.Event != abi.CMREQReceived {
					return fmt.Errorf("event %v", r.ev.Event)
				}
				return nil
			case <-time.After(Wait):
				return fmt.Errorf("blocked GET_EVENT not woken within %v", Wait)
			}
		}},
		{Name: "get_event/enomem-data-stays-queued", Spec: "ucm-abi.md §3.2: data_len below the event's data → ENOMEM, event kept", run: func(e *env) error {
			p, err := pairWithREQ(e)
			if err != nil {
				return err
			}
			_, err = p.Passive.GetEventLen(abi.MaxREQPrivateData-1, 255)
			if err := expect(err, unix.ENOMEM); err != nil {
				return err
			}
			_, err = p.Passive.GetEvent()
			return check("GET_EVENT retry", err)
		}},
		{Name: "get_event/efault-response-stays-queued", Spec: "ucm-abi.md §3.2: response unwritable → EFAULT, event kept", run: func(e *env) error {
			return faultThenRetry(e, func(c *Client, g *abi.EventGet) { g.Response = c.Mem.Bad() })
		}},
		{Name: "get_event/efault-data-stays-queued", Spec: "ucm-abi.md §3.2: data unwritable → EFAULT, event kept", run: func(e *env) error {
			return faultThenRetry(e, func(c *Client, g *abi.EventGet) { g.Data = c.Mem.Bad() })
		}},
		{Name: "get_event/rej-info-enomem-efault", Spec: "ucm-abi.md §3.2: REJ's ARI goes to info: info_len short → ENOMEM, info unwritable → EFAULT, then delivered", run: func(e *env) error {
			p, err := pairWithREQ(e)
			if err != nil {
				return err
			}
			ev, err := p.Passive.Expect(abi.CMREQReceived, Wait)
			if err != nil {
				return err
			}
			ari := []byte{1, 2, 3, 4, 5, 6, 7, 8}
			if err := p.Passive.SendInfo(abi.CmdSendREJ, ev.ID, 28, ari, []byte("no")); err != nil {
				return check("SEND_REJ", err)
			}
			if ok, err := p.Active.F.WaitReadable(Wait); err != nil || !ok {
				return fmt.Errorf("no REJ event: %v", err)
			}
			_, err = p.Active.GetEventLen(255, 7)
			if err := expect(err, unix.ENOMEM); err != nil {
				return check("short info", err)
			}
			g := &abi.EventGet{Response: p.Active.Mem.Alloc(abi.EventRespSize), Data: p.Active.Mem.Alloc(255),
				Info: p.Active.Mem.Bad(), DataLen: 255, InfoLen: 255}
			if err := expect(p.Active.Cmd(abi.CmdEvent, abi.EventRespSize, g), unix.EFAULT); err != nil {
				return check("bad info", err)
			}
			rej, err := p.Active.GetEvent()
			if err != nil {
				return check("GET_EVENT", err)
			}
			if rej.Event != abi.CMREJReceived || rej.U.REJ().Reason != 28 || rej.Present != abi.PresData|abi.PresInfo ||
				!bytes.HasPrefix(rej.Info, ari) || !bytes.HasPrefix(rej.Data, []byte("no")) {
				return fmt.Errorf("REJ event %v reason %d present %v info %x", rej.Event, rej.U.REJ().Reason, rej.Present, rej.Info)
			}
			return nil
		}},
	}
}

// faultThenRetry fails a GET_EVENT of a REQ with a bad buffer, then checks
// the REQ is still delivered whole, with one new id.
func faultThenRetry(e *env, spoil func(*Client, *abi.EventGet)) error {
	p, err := pairWithREQ(e)
	if err != nil {
		return err
	}
	c := p.Passive
	g := &abi.EventGet{Response: c.Mem.Alloc(abi.EventRespSize), Data: c.Mem.Alloc(255), Info: c.Mem.Alloc(255), DataLen: 255, InfoLen: 255}
	spoil(c, g)
	if err := expect(c.Cmd(abi.CmdEvent, abi.EventRespSize, g), unix.EFAULT); err != nil {
		return err
	}
	ev, err := c.GetEvent()
	if err != nil {
		return check("GET_EVENT retry", err)
	}
	if ev.Event != abi.CMREQReceived {
		return fmt.Errorf("retry got %v, want the REQ", ev.Event)
	}
	ok, err := c.F.WaitReadable(0)
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("still readable after the REQ was delivered")
	}
	return nil
}
