package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
)

// Headers every approval record message carries beside its JSON value, so
// that a reader can sort and filter the bucket from the headers alone (a
// headers-only consumer), without reading and decoding each record. They
// repeat fields of the record and are never the authority: the value is.
// Values are query-escaped (agent names and run ids are free text).
const (
	HeaderRecordStatus  = "Countersign-Status"
	HeaderRecordCreated = "Countersign-Created" // request created_at, Unix nanoseconds (absent when unset)
	HeaderRecordAgent   = "Countersign-Agent"
	HeaderRecordRun     = "Countersign-Run"
	HeaderRecordTenant  = "Countersign-Tenant"
)

// RecordHeader returns the summary headers of rec (none for nil: readers
// then read the record itself).
func RecordHeader(rec *contracts.Record) nats.Header {
	if rec == nil {
		return nil
	}
	h := nats.Header{}
	h.Set(HeaderRecordStatus, url.QueryEscape(rec.Status))
	if !rec.Request.CreatedAt.IsZero() {
		h.Set(HeaderRecordCreated, strconv.FormatInt(rec.Request.CreatedAt.UnixNano(), 10))
	}
	h.Set(HeaderRecordAgent, url.QueryEscape(rec.Request.Run.Agent))
	if rec.Request.Run.ID != "" {
		h.Set(HeaderRecordRun, url.QueryEscape(rec.Request.Run.ID))
	}
	if rec.Request.Run.Tenant != "" {
		h.Set(HeaderRecordTenant, url.QueryEscape(rec.Request.Run.Tenant))
	}
	return h
}

// RecordSummary is what a record message's headers tell of it.
type RecordSummary struct {
	Status    string
	CreatedAt time.Time
	Agent     string
	RunID     string
	Tenant    string
}

// ParseRecordHeader reads the summary headers; ok is false when the
// message has none (written before records carried them) or they are
// unreadable, and the record's value must be read instead.
func ParseRecordHeader(h nats.Header) (s RecordSummary, ok bool) {
	if h == nil {
		return s, false
	}
	status, created := h.Get(HeaderRecordStatus), h.Get(HeaderRecordCreated)
	if status == "" {
		return s, false
	}
	if created != "" {
		ns, err := strconv.ParseInt(created, 10, 64)
		if err != nil {
			return s, false
		}
		s.CreatedAt = time.Unix(0, ns)
	}
	var errs [4]error
	s.Status, errs[0] = url.QueryUnescape(status)
	s.Agent, errs[1] = url.QueryUnescape(h.Get(HeaderRecordAgent))
	s.RunID, errs[2] = url.QueryUnescape(h.Get(HeaderRecordRun))
	s.Tenant, errs[3] = url.QueryUnescape(h.Get(HeaderRecordTenant))
	for _, err := range errs {
		if err != nil {
			return RecordSummary{}, false
		}
	}
	return s, true
}

// RecordWriter writes approval records into the hitl_approvals bucket as
// the bucket's own Create and Update do (a publish to the key's subject
// that expects the key's last revision), with the summary headers added.
// Its errors match the bucket's: jetstream.ErrKeyExists when Create finds
// the key, jetstream.ErrKeyRevisionMismatch when Update's revision is not
// the key's last.
type RecordWriter struct {
	js jetstream.JetStream
}

// NewRecordWriter returns a writer of records through js.
func NewRecordWriter(js jetstream.JetStream) *RecordWriter { return &RecordWriter{js: js} }

// Create writes the first revision of record id (data encodes rec). A
// value under id that is not a record (contracts.CheckRecordIdentity:
// something the server published there as the answer to someone's
// request, before the arbiter wrote the record) is replaced.
func (w *RecordWriter) Create(ctx context.Context, id string, data []byte, rec *contracts.Record) (uint64, error) {
	rev, err := w.write(ctx, id, data, rec, 0)
	if !isWrongLastSequence(err) {
		return rev, err
	}
	if last, junk := w.notARecord(ctx, id); junk {
		return w.Update(ctx, id, data, rec, last)
	}
	return 0, fmt.Errorf("%w: %w", err, jetstream.ErrKeyExists)
}

// Update writes a new revision of record id over revision last.
func (w *RecordWriter) Update(ctx context.Context, id string, data []byte, rec *contracts.Record, last uint64) (uint64, error) {
	rev, err := w.write(ctx, id, data, rec, last)
	if isWrongLastSequence(err) {
		return 0, fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
	}
	return rev, err
}

// write publishes a revision of record id over revision last (0: none).
// A revision over another is a roll-up of the key's subject: the bucket's
// stream takes a second message on a key only as a roll-up
// (ApprovalsBucketConfig), so what the server publishes on a record's key
// as someone's answer never replaces the record.
func (w *RecordWriter) write(ctx context.Context, id string, data []byte, rec *contracts.Record, last uint64) (uint64, error) {
	if !contracts.ValidEventID(id) {
		return 0, jetstream.ErrInvalidKey
	}
	return publishRevision(ctx, w.js, &nats.Msg{Subject: RecordSubject(id), Header: RecordHeader(rec), Data: data}, last)
}

// publishRevision publishes m, a key's value, over the key's revision last
// (0: the key has none), a roll-up of the key's subject when last is not 0.
func publishRevision(ctx context.Context, js jetstream.JetStream, m *nats.Msg, last uint64) (uint64, error) {
	if last > 0 {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	}
	ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(last))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// UpdateKey writes data as key's value in bucket over revision last, as a
// roll-up of the key's subject: the way to update a key of a bucket whose
// stream takes a second message on a key only as a roll-up (the grants'
// and sessions'; a deletion there is a purge, which is a roll-up too).
// Its error is jetstream.ErrKeyRevisionMismatch when last is not the key's
// last revision.
func UpdateKey(ctx context.Context, js jetstream.JetStream, bucket, key string, data []byte, last uint64) (uint64, error) {
	rev, err := publishRevision(ctx, js, &nats.Msg{Subject: "$KV." + bucket + "." + key, Data: data}, last)
	if isWrongLastSequence(err) {
		return 0, fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
	}
	return rev, err
}

// notARecord reads the value under id and reports, with its revision,
// whether it is something other than id's record.
func (w *RecordWriter) notARecord(ctx context.Context, id string) (uint64, bool) {
	st, err := w.js.Stream(ctx, RecordStream)
	if err != nil {
		return 0, false
	}
	m, err := st.GetLastMsgForSubject(ctx, RecordSubject(id))
	if err != nil {
		return 0, false
	}
	var probe struct {
		Spec    string `json:"spec"`
		Request struct {
			EventID string `json:"event_id"`
		} `json:"request"`
	}
	if json.Unmarshal(m.Data, &probe) == nil && contracts.CheckRecordIdentity(id, probe.Spec, probe.Request.EventID) == nil {
		return 0, false
	}
	return m.Sequence, true
}

// RecordSubject is the subject record id is stored under in its bucket's
// stream.
func RecordSubject(id string) string { return "$KV." + contracts.BucketApprovals + "." + id }

// RecordStream is the name of the approvals bucket's stream.
const RecordStream = "KV_" + contracts.BucketApprovals

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// PutUnlessSame makes data the value of key in bucket (kv, opened on that
// bucket), unless same says the key's value is as good: a roll-up over the
// key's last revision (UpdateKey), read again when another writer moved
// it in between, a few times. It reports whether it wrote.
func PutUnlessSame(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, bucket, key string, data []byte, same func([]byte) bool) (bool, error) {
	for attempt := 0; ; attempt++ {
		var last uint64
		e, err := kv.Get(ctx, key)
		switch {
		case err == nil:
			if same(e.Value()) {
				return false, nil
			}
			last = e.Revision()
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return false, err
		}
		_, err = UpdateKey(ctx, js, bucket, key, data, last)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || attempt == 4 {
			return false, err
		}
	}
}
