package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events"
	"github.com/countersign/countersign/orchestrator/directory"
)

// This file publishes the directory every role judges by: the API is the
// role that holds the directory file and the tokens, so it writes what they
// say of each identity (tenants, groups, roles) to the hitl_policy bucket
// under contracts.DirectoryKey, at start and whenever either changes. The
// arbiter reads that document when it applies each vote, command and
// request, so a person removed here stops counting on every surface at
// once.

// directoryPoll is how often the API looks for a reloaded directory when
// nobody tells it (DirectoryChanged).
const directoryPoll = time.Second

// DirectoryDocument is what tokens and dir say of every identity they
// know. A person in both has the union of their roles; their tenants are
// the union too, where an empty list (no limit) wins.
func DirectoryDocument(tokens []Token, dir *directory.Directory) contracts.Directory {
	byID := map[string]*contracts.DirectoryPerson{}
	var order []string
	get := func(id string) *contracts.DirectoryPerson {
		if p, ok := byID[id]; ok {
			return p
		}
		p := &contracts.DirectoryPerson{ID: id}
		byID[id] = p
		order = append(order, id)
		return p
	}
	for _, u := range dir.Users() {
		p := get(u.ID)
		p.Email, p.Groups, p.Tenants = u.Email, slices.Clone(u.Groups), slices.Clone(u.Tenants)
		if len(p.Tenants) == 0 {
			p.Tenants = nil
		}
		for _, t := range u.Tokens {
			p.Roles = unionRoles(p.Roles, t.Roles)
		}
	}
	for _, t := range tokens {
		if t.Subject == "" {
			continue
		}
		_, known := byID[t.Subject]
		p := get(t.Subject)
		p.Roles = unionRoles(p.Roles, t.Roles)
		switch {
		case !known:
			p.Tenants = slices.Clone(t.Tenants)
		case len(p.Tenants) > 0 && len(t.Tenants) == 0:
			p.Tenants = nil
		case len(p.Tenants) > 0:
			p.Tenants = unionRoles(p.Tenants, t.Tenants)
		}
		p.Development = p.Development || t.Development
	}
	slices.Sort(order)
	doc := contracts.Directory{Spec: contracts.SpecDirectory, People: make([]contracts.DirectoryPerson, 0, len(order))}
	for _, id := range order {
		doc.People = append(doc.People, *byID[id])
	}
	data, _ := json.Marshal(doc.People) // cannot fail
	sum := sha256.Sum256(data)
	doc.Version = hex.EncodeToString(sum[:])
	return doc
}

func unionRoles(have, add []string) []string {
	for _, r := range add {
		if !slices.Contains(have, r) {
			have = append(have, r)
		}
	}
	slices.Sort(have)
	return have
}

// DirectoryChanged tells the server that its directory may have been
// reloaded: it publishes the new one at once instead of at its next look.
func (s *Server) DirectoryChanged() {
	select {
	case s.dirPoke <- struct{}{}:
	default:
	}
}

// PublishDirectory writes the directory of the server's tokens and
// directory to hitl_policy, unless the same version is there already, and
// returns its version.
func (s *Server) PublishDirectory(ctx context.Context) (string, error) {
	s.dirMu.Lock()
	defer s.dirMu.Unlock()
	var cur *directory.Directory
	if s.cfg.Directory != nil {
		cur = s.cfg.Directory.Current()
	}
	doc := DirectoryDocument(s.cfg.Tokens, cur)
	if doc.Version == s.dirVersion {
		return doc.Version, nil
	}
	kv, err := s.cfg.JS.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		return "", fmt.Errorf("api: open bucket %s: %w", contracts.BucketPolicy, err)
	}
	doc.UpdatedAt = s.cfg.Now().UTC()
	data, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	// A roll-up over the key's last revision (events.PolicyBucketConfig):
	// another replica publishing at the same time moves it, and the
	// directory is read again.
	changed, err := events.PutUnlessSame(ctx, s.cfg.JS, kv, contracts.BucketPolicy, contracts.DirectoryKey, data, func(v []byte) bool {
		var old contracts.Directory
		return json.Unmarshal(v, &old) == nil && old.Spec == contracts.SpecDirectory && old.Version == doc.Version
	})
	if err != nil {
		return "", fmt.Errorf("api: publish the directory: %w", err)
	}
	s.dirVersion = doc.Version
	if !changed {
		return doc.Version, nil
	}
	s.log.Info("directory published", "version", doc.Version, "people", len(doc.People))
	return doc.Version, nil
}

// watchDirectory publishes the directory whenever it changes, until the
// server closes.
func (s *Server) watchDirectory() {
	t := time.NewTicker(directoryPoll)
	defer t.Stop()
	var last *directory.Directory
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			if s.cfg.Directory == nil || s.cfg.Directory.Current() == last {
				continue
			}
		case <-s.dirPoke:
		}
		if s.cfg.Directory != nil {
			last = s.cfg.Directory.Current()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := s.PublishDirectory(ctx); err != nil {
			s.log.Error("the directory could not be published; the arbiter judges by the last one published", "err", err)
		}
		cancel()
	}
}

// issuer is p as the rules of contracts/approval see who gives a command.
func issuer(p *Principal) approval.Issuer {
	return approval.Issuer{ID: p.Subject, Listed: true, Admin: p.Has(RoleAdmin), Tenants: p.Tenants}
}
