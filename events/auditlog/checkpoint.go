package auditlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts/audit"
)

// CheckpointConfig configures the signing of checkpoints.
type CheckpointConfig struct {
	JS     jetstream.JetStream
	Signer audit.Signer
	// Every is how many entries make a checkpoint due (default 1000, at
	// most audit.MaxLeaves); Interval how old the oldest entry not signed
	// yet may grow before one is due however few there are (default one
	// minute).
	Every    int
	Interval time.Duration
	// Now is the clock (default time.Now); Logger defaults to discarding.
	Now    func() time.Time
	Logger *slog.Logger
}

func (c *CheckpointConfig) setDefaults() {
	if c.Every == 0 {
		c.Every = 1000
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports what is wrong with c, naming the field.
func (c *CheckpointConfig) Validate() error {
	var errs []error
	if c.Every < 0 || c.Every > audit.MaxLeaves {
		errs = append(errs, fmt.Errorf("auditlog: CheckpointConfig.Every must be 1 to %d", audit.MaxLeaves))
	}
	if c.Interval < 0 {
		errs = append(errs, errors.New("auditlog: CheckpointConfig.Interval must not be negative"))
	}
	return errors.Join(errs...)
}

// last is the log's last checkpoint: its stream sequence (0 when there is
// none), the entry it ends at and its head.
type last struct {
	seq, after uint64
	head       audit.Hash
}

// lastCheckpoint reads the log's last checkpoint.
//
// Only the arbiter may publish on the log's subjects, but the server also
// publishes there what it answers to whoever names such a subject as the
// reply of a request (an account info, a message get's envelope), and the
// log stores it. Such a message is no checkpoint: the chain goes on from
// the newest one that is, and seq stays the subject's last sequence (the
// next checkpoint's compare-and-set).
func lastCheckpoint(ctx context.Context, st jetstream.Stream) (last, error) {
	m, err := st.GetLastMsgForSubject(ctx, audit.SubjectCheckpoint)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return last{head: audit.Genesis}, nil
	}
	if err != nil {
		return last{}, err
	}
	subjectLast := m.Sequence
	first := uint64(0) // the stream's first sequence, read once if needed
	for {
		if c, err := audit.PayloadOf(string(m.Data)); err == nil {
			head, err := audit.ParseHex(c.Head)
			if err == nil {
				return last{seq: subjectLast, after: c.Last().Seq, head: head}, nil
			}
		}
		if first == 0 {
			info, err := st.Info(ctx)
			if err != nil {
				return last{}, err
			}
			first = max(info.State.FirstSeq, 1)
		}
		if m, err = previousCheckpoint(ctx, st, m.Sequence, first); err != nil {
			return last{}, err
		}
		if m == nil {
			return last{seq: subjectLast, head: audit.Genesis}, nil
		}
	}
}

// previousCheckpoint is the message on the checkpoint subject stored before
// seq and at or after first (nil: none).
func previousCheckpoint(ctx context.Context, st jetstream.Stream, seq, first uint64) (*jetstream.RawStreamMsg, error) {
	for s := seq - 1; s >= first && s > 0; s-- {
		m, err := st.GetMsg(ctx, s)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m.Subject == audit.SubjectCheckpoint {
			return m, nil
		}
	}
	return nil, nil
}

// Checkpoint signs the entries after the last checkpoint when a checkpoint
// is due (Every of them, or the oldest older than Interval), and returns
// how many it covered: 0 when none was due, or another replica stored its
// checkpoint first.
func Checkpoint(ctx context.Context, cfg CheckpointConfig) (int, error) {
	cfg.setDefaults()
	st, err := cfg.JS.Stream(ctx, audit.Stream)
	if err != nil {
		return 0, err
	}
	prev, err := lastCheckpoint(ctx, st)
	if err != nil {
		return 0, err
	}
	end := st.CachedInfo().State.LastSeq
	now := cfg.Now()
	if due, err := isDue(ctx, st, cfg, prev, end, now); err != nil || !due {
		return 0, err
	}
	cp := audit.NewCheckpoint(prev.head, now)
	var oldest time.Time
	err = Read(ctx, cfg.JS, prev.after+1, end, func(seq uint64, m jetstream.Msg) error {
		entries, first, err := audit.Entries(m.Subject(), m.Data())
		if err != nil || len(entries) == 0 {
			// Not entries (see lastCheckpoint): signed by no checkpoint,
			// which a verification of the log names.
			return nil
		}
		// A checkpoint holds whole messages: the next one starts after
		// the last message this one covers.
		if len(cp.Leaves)+len(entries) > audit.MaxLeaves {
			return errStop
		}
		if md, err := m.Metadata(); err == nil && oldest.IsZero() {
			oldest = md.Timestamp
		}
		for i, raw := range entries {
			if err := cp.Append(posOf(seq, first, i), raw); err != nil {
				return err
			}
		}
		if len(cp.Leaves) >= cfg.Every {
			return errStop
		}
		return nil
	})
	if err != nil || len(cp.Leaves) == 0 || len(cp.Leaves) < cfg.Every && now.Sub(oldest) < cfg.Interval {
		return 0, err
	}
	token, err := audit.Sign(cfg.Signer, *cp)
	if err != nil {
		return 0, err
	}
	msg := &nats.Msg{Subject: audit.SubjectCheckpoint, Data: []byte(token), Header: nats.Header{}}
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(prev.seq, 10))
	if _, err := cfg.JS.PublishMsg(ctx, msg, jetstream.WithExpectStream(audit.Stream)); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return 0, nil // another replica's checkpoint continues the last one
		}
		return 0, err
	}
	cfg.Logger.Info("audit checkpoint signed", "entries", cp.Span(), "head", cp.Head)
	return len(cp.Leaves), nil
}

// isDue tells, without reading the entries, whether a checkpoint is due:
// the entries after prev's are every message after its last entry but the
// checkpoint message itself, and the oldest of them is the first.
func isDue(ctx context.Context, st jetstream.Stream, cfg CheckpointConfig, prev last, end uint64, now time.Time) (bool, error) {
	first := prev.after + 1
	if first == prev.seq {
		first++
	}
	if end < first {
		return false, nil
	}
	if n := end - prev.after - min(prev.seq, 1); n >= uint64(cfg.Every) {
		return true, nil
	}
	m, err := st.GetMsg(ctx, first)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil // retention took it: read what is there
	}
	if err != nil {
		return false, err
	}
	return now.Sub(m.Time) >= cfg.Interval, nil
}

// RunCheckpoints signs checkpoints as they fall due until ctx ends: it
// looks every half Interval, and when told on due (an appender that has
// appended Every entries since it last told).
func RunCheckpoints(ctx context.Context, cfg CheckpointConfig, due <-chan struct{}) error {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	tick := time.NewTicker(max(cfg.Interval/2, time.Millisecond))
	defer tick.Stop()
	for {
		for {
			n, err := Checkpoint(ctx, cfg)
			if err != nil {
				if ctx.Err() == nil {
					cfg.Logger.Warn("audit checkpoint failed; trying again", "err", err)
				}
				break
			}
			if n == 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-due:
		}
	}
}
