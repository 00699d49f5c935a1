package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// ReceiptWait bounds how long ReadReceipt waits for a receipt the record
// says was issued but that is not stored yet: the arbiter stores it right
// after the claim's record write, before it announces the claim.
const ReceiptWait = 5 * time.Second

// ReadReceipt returns the receipt the arbiter issued for claim, the
// accepted claim of approval eventID, from the hitl_receipts bucket (see
// contracts.IssuedReceipt): "" when the claim names none (the arbiter signs
// no receipts) or it did not appear within ReceiptWait. A receipt is a
// bearer token: give it only to the claimant.
func ReadReceipt(ctx context.Context, js jetstream.JetStream, eventID string, claim *contracts.Claim) (contracts.IssuedReceipt, error) {
	return (&Receipts{JS: js}).Read(ctx, eventID, claim)
}

// Receipts reads the receipts of accepted claims (ReadReceipt), opening
// the hitl_receipts bucket at its first read and keeping it: a bucket's
// opening asks the server for the stream's info, a round trip to the
// stream leader that a claim need not pay each time.
type Receipts struct {
	JS jetstream.JetStream

	mu sync.Mutex
	kv jetstream.KeyValue
}

func (r *Receipts) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kv != nil {
		return r.kv, nil
	}
	kv, err := r.JS.KeyValue(ctx, contracts.BucketReceipts)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: open bucket %s: %w", contracts.BucketReceipts, err)
	}
	r.kv = kv
	return kv, nil
}

// Read is ReadReceipt through r's bucket.
func (r *Receipts) Read(ctx context.Context, eventID string, claim *contracts.Claim) (contracts.IssuedReceipt, error) {
	if claim == nil || claim.ReceiptID == "" {
		return contracts.IssuedReceipt{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ReceiptWait)
	defer cancel()
	kv, err := r.bucket(ctx)
	if err != nil {
		return contracts.IssuedReceipt{}, err
	}
	decode := func(e jetstream.KeyValueEntry) (contracts.IssuedReceipt, error) {
		var r contracts.IssuedReceipt
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return r, fmt.Errorf("orchestrator: receipt %s is unreadable: %w", eventID, err)
		}
		if r.ClaimID != claim.ClaimID {
			return contracts.IssuedReceipt{}, nil // another claim's: none for this one
		}
		return r, nil
	}
	e, err := kv.Get(ctx, eventID)
	switch {
	case err == nil:
		return decode(e)
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return contracts.IssuedReceipt{}, fmt.Errorf("orchestrator: read receipt %s: %w", eventID, err)
	}
	w, err := kv.Watch(ctx, eventID, jetstream.UpdatesOnly())
	if err != nil {
		return contracts.IssuedReceipt{}, fmt.Errorf("orchestrator: watch receipt %s: %w", eventID, err)
	}
	defer func() { _ = w.Stop() }()
	// Stored between the read and the watch: read once more.
	if e, err := kv.Get(ctx, eventID); err == nil {
		return decode(e)
	}
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return contracts.IssuedReceipt{}, ctx.Err()
			}
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				return decode(e)
			}
		case <-ctx.Done():
			return contracts.IssuedReceipt{}, nil
		}
	}
}
