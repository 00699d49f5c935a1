package directory

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is how often a Watcher checks its file by default.
const DefaultInterval = 2 * time.Second

// WatchConfig configures Watch.
type WatchConfig struct {
	// Path of the directory file.
	Path string
	// Interval between checks of the file's modification time, size and
	// content (default DefaultInterval; negative: never, reload on signals
	// and Reload only).
	Interval time.Duration
	// Signals that make the watcher re-read the file at once, such as
	// syscall.SIGHUP. While the watcher runs they no longer have their
	// default effect.
	Signals []os.Signal
	// Logger receives one line per switch and per failed reload (default: discard).
	Logger *slog.Logger
	// OnReload, when set, is called after every reload that read changed
	// content: with the new directory, or with the error that kept the old
	// one in force.
	OnReload func(*Directory, error)
}

// Watcher keeps a directory file loaded: it re-reads the file when it
// changes and on signals, and switches atomically to each valid version. A
// version that does not parse is logged and ignored; the previous directory
// stays in force. It is a Source.
type Watcher struct {
	cfg WatchConfig
	log *slog.Logger
	cur atomic.Pointer[Directory]

	mu      sync.Mutex // serializes reloads
	seen    fileStamp  // the file's time and size when last read
	lastErr string     // the last failure, reported once by polls
	stop    context.CancelFunc
	done    chan struct{}
	sigs    chan os.Signal
	once    sync.Once
}

type fileStamp struct {
	mod  int64 // nanoseconds since the epoch
	size int64
	ok   bool
}

// Watch loads the file, which must be valid, and keeps watching it until
// ctx ends or Close is called.
func Watch(ctx context.Context, cfg WatchConfig) (*Watcher, error) {
	if cfg.Path == "" {
		return nil, errors.New("directory: WatchConfig.Path is required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	st := stamp(cfg.Path)
	d, err := Load(cfg.Path)
	if err != nil {
		return nil, err
	}
	w.cur.Store(d)
	w.seen = st
	ctx, w.stop = context.WithCancel(ctx)
	if len(cfg.Signals) > 0 {
		w.sigs = make(chan os.Signal, 1)
		signal.Notify(w.sigs, cfg.Signals...)
	}
	go w.run(ctx)
	return w, nil
}

// Current is the directory in force.
func (w *Watcher) Current() *Directory { return w.cur.Load() }

// Close stops watching. The last directory stays available.
func (w *Watcher) Close() error {
	w.once.Do(func() {
		w.stop()
		<-w.done
		if w.sigs != nil {
			signal.Stop(w.sigs)
		}
	})
	return nil
}

// Reload re-reads the file now. Content equal to the directory in force
// changes nothing; invalid content keeps it in force, is logged, and is
// returned as the error.
func (w *Watcher) Reload() error {
	return w.reload(false)
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	var tick <-chan time.Time
	if w.cfg.Interval > 0 {
		t := time.NewTicker(w.cfg.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-w.sigs:
			w.log.Info("directory: reloading on signal", "file", w.cfg.Path, "signal", sig.String())
			_ = w.reload(false)
		case <-tick:
			_ = w.reload(true)
		}
	}
}

// reload reads the file and switches to it if it changed and is valid. A
// poll reads only when the file's time or size changed, and reports the
// same failure once.
func (w *Watcher) reload(poll bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := stamp(w.cfg.Path)
	if poll && st == w.seen {
		return nil
	}
	w.seen = st
	d, err := w.read()
	if err != nil {
		if !poll || err.Error() != w.lastErr {
			w.lastErr = err.Error()
			w.log.Error("directory: reload failed; the previous directory stays in force", "file", w.cfg.Path, "err", err)
			w.notify(nil, err)
		}
		return err
	}
	w.lastErr = ""
	if d == nil {
		return nil // unchanged
	}
	w.cur.Store(d)
	w.log.Info("directory: switched", "file", w.cfg.Path, "users", d.Len(), "groups", len(d.names), "sha256", d.SHA256()[:12])
	w.notify(d, nil)
	return nil
}

// read parses the file; it returns nil, nil when the content is the
// directory in force.
func (w *Watcher) read() (*Directory, error) {
	data, err := os.ReadFile(w.cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("directory: %w", err)
	}
	if old := w.cur.Load(); old != nil && sha256.Sum256(data) == old.sum {
		return nil, nil
	}
	d, err := Parse(data)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.File = w.cfg.Path
		}
		return nil, err
	}
	return d, nil
}

func (w *Watcher) notify(d *Directory, err error) {
	if w.cfg.OnReload != nil {
		w.cfg.OnReload(d, err)
	}
}

func stamp(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime().UnixNano(), size: fi.Size(), ok: true}
}
