package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// fileLock is the lock file of the data directory: a serve holds an
// exclusive lock on it for as long as it runs.
const fileLock = "serve.lock"

// ErrDataDirInUse is matched (errors.Is) by the error of a serve whose data
// directory another running serve holds.
var ErrDataDirInUse = errors.New("data directory in use")

// DataDirInUseError names the serve that holds a data directory.
type DataDirInUseError struct {
	Dir string
	// PID of the serve that holds the directory, 0 when it has not said.
	PID int
	// URL of its API, "" when unknown.
	URL string
}

func (e *DataDirInUseError) Error() string {
	who := "another countersign serve"
	switch {
	case e.PID != 0 && e.URL != "":
		who += fmt.Sprintf(" (PID %d, %s)", e.PID, e.URL)
	case e.PID != 0:
		who += fmt.Sprintf(" (PID %d)", e.PID)
	}
	return fmt.Sprintf("serve: the data directory %s is in use by %s; stop that one first, or give this one its own --data", e.Dir, who)
}

func (e *DataDirInUseError) Is(target error) bool { return target == ErrDataDirInUse }

// lockInfo is what the holder of the lock writes into the lock file.
type lockInfo struct {
	PID int `json:"pid"`
}

// lockDataDir takes the exclusive lock of dir, or fails at once with a
// *DataDirInUseError when another serve holds it. The lock is an OS file
// lock (flock) on <dir>/serve.lock: the kernel releases it when the process
// ends however it ends, so a killed serve never leaves a stale lock. The
// lock belongs to the open file, so a second lockDataDir of the same
// directory fails even in the same process. release gives it back.
func lockDataDir(dir string) (release func(), err error) {
	path := filepath.Join(dir, fileLock)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("serve: lock the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, holder(dir)
		}
		return nil, fmt.Errorf("serve: lock %s: %w", path, err)
	}
	data, _ := json.Marshal(lockInfo{PID: os.Getpid()})
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(append(data, '\n'), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("serve: write %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// holder describes the serve that holds the lock of dir: its PID from the
// lock file, and its URL from serve.json when that file is its own.
func holder(dir string) *DataDirInUseError {
	e := &DataDirInUseError{Dir: dir}
	var li lockInfo
	if b, err := os.ReadFile(filepath.Join(dir, fileLock)); err == nil && json.Unmarshal(b, &li) == nil {
		e.PID = li.PID
	}
	var si serveInfo
	if b, err := os.ReadFile(filepath.Join(dir, fileServe)); err == nil && json.Unmarshal(b, &si) == nil {
		if e.PID == 0 || si.PID == e.PID {
			e.PID, e.URL = si.PID, si.URL
		}
	}
	return e
}
