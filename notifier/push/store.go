package push

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// Devices is where the channel finds a person's subscriptions and drops
// those their push service says are gone.
type Devices interface {
	// Devices returns person's subscriptions (none: an empty list).
	Devices(ctx context.Context, person string) ([]contracts.PushDevice, error)
	// Forget drops subscription id of person, if it is still there.
	Forget(ctx context.Context, person, id string) error
	// Delivered records at as the last delivery to person's devices ids
	// (contracts.PushDevice.LastDeliveredAt), for those still there.
	Delivered(ctx context.Context, person string, ids []string, at time.Time) error
}

// MaxDevices bounds the subscriptions of one person.
const MaxDevices = 20

// ErrTooManyDevices: a person already has MaxDevices subscriptions.
var ErrTooManyDevices = errors.New("push: too many subscribed devices")

// Store keeps the subscriptions in the bucket contracts.BucketPush, one key
// per person, changed with compare-and-set. It is safe for concurrent use.
type Store struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// OpenStore opens the bucket (provisioned by events.Provision).
func OpenStore(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, contracts.BucketPush)
	if err != nil {
		return nil, fmt.Errorf("push: open bucket %s: %w", contracts.BucketPush, err)
	}
	return &Store{js: js, kv: kv}, nil
}

// get returns person's value and the key's last revision (0: none). A
// value under person's key that is not their devices (the server stores
// its answer to anyone's JetStream request on the reply subject the
// requester names) is not taken: the newest that is stands
// (events.NewestReadable), and the next write replaces what was stored.
// A push never goes to devices the key does not name.
func (s *Store) get(ctx context.Context, person string) (contracts.PushDevices, uint64, error) {
	none := contracts.PushDevices{Spec: contracts.SpecPushDevices, Person: person}
	r, err := events.NewestReadable(ctx, s.js, s.kv, contracts.BucketPush, contracts.PushKey(person), func(data []byte) bool {
		return contracts.Owned(data, contracts.SpecPushDevices, "person", person)
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return none, 0, nil
	}
	if err != nil {
		return contracts.PushDevices{}, 0, fmt.Errorf("push: devices of %s: %w", person, err)
	}
	if r.Value == nil {
		return none, r.Last, nil
	}
	var kept contracts.PushDevices
	if err := contracts.Decode(r.Value, &kept); err != nil || kept.Spec != contracts.SpecPushDevices {
		return contracts.PushDevices{}, 0, fmt.Errorf("push: devices of %s are unreadable (spec %q): %v", person, kept.Spec, err)
	}
	return kept, r.Last, nil
}

// Devices implements Devices.
func (s *Store) Devices(ctx context.Context, person string) ([]contracts.PushDevice, error) {
	v, _, err := s.get(ctx, person)
	return v.Devices, err
}

// update applies change to person's value with compare-and-set, trying
// again when another writer came first.
func (s *Store) update(ctx context.Context, person string, change func(*contracts.PushDevices) (bool, error)) error {
	for range 10 {
		v, rev, err := s.get(ctx, person)
		if err != nil {
			return err
		}
		if changed, err := change(&v); err != nil || !changed {
			return err
		}
		data, err := contracts.Marshal(v)
		if err != nil {
			return err
		}
		// Over rev as a roll-up: the bucket takes a second value on a key
		// only so (events.PushBucketConfig).
		_, err = events.UpdateKey(ctx, s.js, contracts.BucketPush, contracts.PushKey(person), data, rev)
		if err == nil || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err
		}
	}
	return fmt.Errorf("push: devices of %s kept changing", person)
}

// Add stores d for person, replacing a subscription with the same endpoint
// (a browser that subscribes again keeps its place) and keeping its id.
// It returns the stored device.
func (s *Store) Add(ctx context.Context, person string, d contracts.PushDevice) (contracts.PushDevice, error) {
	err := s.update(ctx, person, func(v *contracts.PushDevices) (bool, error) {
		if i := slices.IndexFunc(v.Devices, func(x contracts.PushDevice) bool { return x.Endpoint == d.Endpoint }); i >= 0 {
			d.ID = v.Devices[i].ID
			v.Devices[i] = d
			return true, nil
		}
		if len(v.Devices) >= MaxDevices {
			return false, ErrTooManyDevices
		}
		v.Devices = append(v.Devices, d)
		return true, nil
	})
	return d, err
}

// Remove drops subscription id of person and reports whether it was there.
func (s *Store) Remove(ctx context.Context, person, id string) (bool, error) {
	found := false
	err := s.update(ctx, person, func(v *contracts.PushDevices) (bool, error) {
		n := len(v.Devices)
		v.Devices = slices.DeleteFunc(v.Devices, func(x contracts.PushDevice) bool { return x.ID == id })
		found = len(v.Devices) < n
		return found, nil
	})
	return found, err
}

// Forget implements Devices.
func (s *Store) Forget(ctx context.Context, person, id string) error {
	_, err := s.Remove(ctx, person, id)
	return err
}

// Delivered implements Devices. A device whose last delivery is already
// at or after at keeps it (deliveries finish out of order).
func (s *Store) Delivered(ctx context.Context, person string, ids []string, at time.Time) error {
	return s.update(ctx, person, func(v *contracts.PushDevices) (bool, error) {
		changed := false
		for i := range v.Devices {
			if d := &v.Devices[i]; slices.Contains(ids, d.ID) && d.LastDeliveredAt.Before(at) {
				d.LastDeliveredAt, changed = at.UTC(), true
			}
		}
		return changed, nil
	})
}
