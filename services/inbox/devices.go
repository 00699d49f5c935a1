package inbox

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
)

// The devices page lists the devices on which the signed-in person gets
// push notifications, subscribes this browser (the page's script asks for
// permission and subscribes with the server's VAPID key, then posts the
// subscription here) and removes devices. The subscriptions are the API's:
// the inbox passes the person's principal.

// PushBackend is what the inbox needs of the API for push notifications
// (an *api.Server has it): the VAPID public key, and a person's devices.
type PushBackend interface {
	PushKey() (string, bool)
	SubscribePush(ctx context.Context, p api.Principal, sub api.PushSubscription) (contracts.PushDevice, *api.Error)
	PushDevices(ctx context.Context, p api.Principal) ([]api.PushDevice, *api.Error)
	RemovePushDevice(ctx context.Context, p api.Principal, id string) *api.Error
}

// registerDevices serves the devices page and its posts.
func (in *Inbox) registerDevices(mux Backend) {
	mux.Handle("GET /devices", in.page(in.getDevices))
	mux.Handle("POST /devices", in.jsonPost(in.postDevice))
	mux.Handle("POST /devices/{device_id}/remove", in.page(in.postRemoveDevice))
}

// deviceRow is one subscribed device on the devices page.
type deviceRow struct {
	ID      string
	Name    string
	Service string
	Added   moment
	// Notified is the last delivery to the device (to within an hour);
	// empty: none yet.
	Notified moment
}

type devicesPage struct {
	Page
	// Off says why push notifications are off on this server, when they are.
	Off string
	// Key is the VAPID public key PushManager.subscribe takes.
	Key     string
	Devices []deviceRow
	Result  string
	Error   string
}

// getDevices serves GET /devices[?added=ID|removed=NAME].
func (in *Inbox) getDevices(w http.ResponseWriter, r *http.Request, sess *session) {
	pg, status := in.devicesPage(r.Context(), sess)
	q := r.URL.Query()
	for _, d := range pg.Devices {
		if q.Get("added") == d.ID {
			pg.Result = "Notifications are on for “" + d.Name + "”: approvals you may decide are sent to it."
		}
	}
	if q.Has("removed") {
		pg.Result = "The device is removed: it gets no more notifications."
	}
	in.render(w, status, "devices", pg)
}

func (in *Inbox) devicesPage(ctx context.Context, sess *session) (devicesPage, int) {
	pg := devicesPage{Page: in.pageFor(sess, "Devices", "devices")}
	key, ok := in.api.PushKey()
	if !ok {
		pg.Off = "Push notifications are not set up on this server (notify.push in its configuration). Approvals reach you by the other channels."
		return pg, http.StatusOK
	}
	pg.Key = key
	devs, aerr := in.api.PushDevices(ctx, sess.p)
	if aerr != nil {
		pg.Error = "Your devices could not be read: " + aerr.Message
		return pg, aerr.Status
	}
	now := in.now()
	for i := len(devs) - 1; i >= 0; i-- { // newest first
		d := devs[i]
		row := deviceRow{ID: d.ID, Name: d.Name, Service: d.Service}
		if row.Name == "" {
			row.Name = "A device without a name"
		}
		if t, err := time.Parse(time.RFC3339, d.CreatedAt); err == nil {
			row.Added = momentAgo(now, t)
		}
		if t, err := time.Parse(time.RFC3339, d.LastDeliveredAt); err == nil {
			row.Notified = momentAgo(now, t)
		}
		pg.Devices = append(pg.Devices, row)
	}
	return pg, http.StatusOK
}

// deviceAdded is the answer of POST /devices: the device's id and name
// (never its keys).
type deviceAdded struct {
	Device struct {
		ID   string `json:"id"`
		Name string `json:"name,omitempty"`
	} `json:"device"`
}

// postDevice serves POST /devices (form: csrf, name, subscription: the
// browser's PushSubscription.toJSON()): this browser's subscription
// becomes one of the person's devices.
func (in *Inbox) postDevice(w http.ResponseWriter, r *http.Request, sess *session) {
	var sub api.PushSubscription
	dec := json.NewDecoder(strings.NewReader(r.PostForm.Get("subscription")))
	if err := dec.Decode(&sub); err != nil || dec.More() {
		writeJSONError(w, http.StatusBadRequest, codeMalformed, "The browser's subscription could not be read. Reload the page and try again.")
		return
	}
	sub.DeviceName = r.PostForm.Get("name")
	d, aerr := in.api.SubscribePush(r.Context(), sess.p, sub)
	if aerr != nil {
		in.log.Info("inbox push subscription refused", "subject", sess.p.Subject, "code", aerr.Code)
		writeJSONError(w, aerr.Status, aerr.Code, aerr.Message)
		return
	}
	in.log.Info("inbox push device added", "subject", sess.p.Subject, "device", d.ID)
	var ans deviceAdded
	ans.Device.ID, ans.Device.Name = d.ID, d.Name
	writeJSON(w, http.StatusOK, ans)
}

// postRemoveDevice serves POST /devices/{device_id}/remove (form: csrf).
func (in *Inbox) postRemoveDevice(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("device_id")
	if aerr := in.api.RemovePushDevice(r.Context(), sess.p, id); aerr != nil {
		in.log.Info("inbox push device not removed", "subject", sess.p.Subject, "device", id, "code", aerr.Code)
		pg, _ := in.devicesPage(r.Context(), sess)
		pg.Error = "The device was not removed: " + aerr.Message
		in.render(w, aerr.Status, "devices", pg)
		return
	}
	in.log.Info("inbox push device removed", "subject", sess.p.Subject, "device", id)
	http.Redirect(w, r, "/devices?removed="+url.QueryEscape(id), http.StatusSeeOther)
}
