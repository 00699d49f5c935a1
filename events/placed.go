package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// provisionAttempt bounds one pass over the streams and buckets, so that a
// request a forming cluster never answers is sent again while the caller's
// deadline has time left.
const provisionAttempt = 15 * time.Second

// JetStream API error codes a cluster answers while it forms or elects.
const (
	jsErrCodeClusterNoPeers      jetstream.ErrorCode = 10005 // "no suitable peers for placement"
	jsErrCodeClusterNotAvailable jetstream.ErrorCode = 10008 // "JetStream system temporarily unavailable"
	jsErrCodeClusterNotLeader    jetstream.ErrorCode = 10009 // "JetStream cluster can not handle request"
	jsErrCodeStreamOffline       jetstream.ErrorCode = 10118 // "stream is offline"
)

// passes reports whether err is one a cluster that is forming answers
// and stops answering once it has formed: no peers to place replicas on
// yet, no meta leader, a stream whose leader is being elected, a request
// no server answered, or an attempt that ran out of time while the
// caller's deadline has not. A single server without JetStream does not
// pass; a cluster node whose JetStream API is not listening yet does.
func passes(ctx context.Context, err error, replicated bool) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsErrCodeClusterNoPeers, jsErrCodeClusterNotAvailable, jsErrCodeClusterNotLeader, jsErrCodeStreamOffline:
			return true
		}
		return false
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout):
		return true
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return replicated
	case errors.Is(err, context.DeadlineExceeded):
		return ctx.Err() == nil
	}
	return false
}

// streamNames are the streams of every stream and bucket of the contract.
func streamNames(cfg ProvisionConfig) []string {
	var names []string
	for _, sc := range StreamConfigs(cfg) {
		names = append(names, sc.Name)
	}
	for _, b := range provisionedBuckets(cfg) {
		names = append(names, "KV_"+b.cfg.Bucket)
	}
	return names
}

// awaitPlaced waits until each stream of names has a leader and a quorum
// of current replicas (the leader and enough followers that a write the
// leader acknowledges is on a majority): the streams answer, also with a
// node down. The cluster has no event for it, so it asks each stream's
// leader, at most every half second, until ctx ends; then the error names
// each stream that was not placed and why.
func awaitPlaced(ctx context.Context, js jetstream.JetStream, names []string) error {
	backoff := 25 * time.Millisecond
	for {
		var waiting []string
		for _, name := range names {
			if why := placement(ctx, js, name); why != "" {
				waiting = append(waiting, name+": "+why)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			slices.Sort(waiting)
			return fmt.Errorf("events: waited for every stream to have a leader and current replicas; not yet: %s: %w",
				strings.Join(waiting, "; "), ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// placement is why stream name is not placed yet, or "" once it has a
// leader and a quorum of current replicas.
func placement(ctx context.Context, js jetstream.JetStream, name string) string {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(rctx, name)
	if err != nil {
		return err.Error()
	}
	info := st.CachedInfo()
	ci := info.Cluster
	switch {
	case ci == nil || info.Config.Replicas <= 1:
		return "" // one copy: nothing to elect
	case ci.Leader == "":
		return "no leader elected"
	}
	current, behind := 1, []string{} // the leader is current
	for _, p := range ci.Replicas {
		if p.Current && !p.Offline {
			current++
		} else {
			behind = append(behind, p.Name)
		}
	}
	if quorum := info.Config.Replicas/2 + 1; current < quorum {
		return fmt.Sprintf("%d of %d replicas current, want %d (behind or offline: %s)", current, info.Config.Replicas, quorum, strings.Join(behind, ", "))
	}
	return ""
}
