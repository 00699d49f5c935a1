package push_test

import (
	"context"
	"encoding/base64"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier/push"
)

// memDevices is a Devices in memory.
type memDevices struct {
	mu     sync.Mutex
	m      map[string][]contracts.PushDevice
	writes int // calls of Delivered
}

func (d *memDevices) add(person string, dev contracts.PushDevice) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string][]contracts.PushDevice{}
	}
	d.m[person] = append(d.m[person], dev)
}

func (d *memDevices) Devices(_ context.Context, person string) ([]contracts.PushDevice, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.m[person]), nil
}

func (d *memDevices) Forget(_ context.Context, person, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m[person] = slices.DeleteFunc(d.m[person], func(x contracts.PushDevice) bool { return x.ID == id })
	return nil
}

func (d *memDevices) Delivered(_ context.Context, person string, ids []string, at time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	for i := range d.m[person] {
		if dev := &d.m[person][i]; slices.Contains(ids, dev.ID) && dev.LastDeliveredAt.Before(at) {
			dev.LastDeliveredAt = at
		}
	}
	return nil
}

// linkSecret is the action key's secret in tests.
var linkSecret = []byte("0123456789abcdef0123456789abcdef-push")

func newVAPID(t *testing.T) *push.VAPID {
	t.Helper()
	k, err := push.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	v, err := push.NewVAPID(k, "mailto:ops@example.com")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newActions(t *testing.T) *push.Actions {
	t.Helper()
	a, err := push.NewActions([]push.Key{{ID: "k1", Secret: linkSecret}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func b64s(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
