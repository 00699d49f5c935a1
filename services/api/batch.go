package api

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
)

// Batch decisions: POST /v1/votes casts several votes in one request,
// either a selection (votes, each naming its approval) or one vote on every
// pending approval of a run that the caller may decide (run_id and vote).
// Each vote goes through the single-vote path on its own approval, with all
// its rules, and the answer reports each result with the status and code a
// single vote would have been answered with.

// MaxBatchVotes is the most votes one batch casts.
const MaxBatchVotes = 100

// batchParallel is how many votes of a batch wait for the arbiter at once.
const batchParallel = 8

// batchVoteNamespace derives a run batch's vote ids: the vote id of
// approval E in a batch whose vote carries vote_id B is the UUIDv5 of
// B + "\n" + E in this namespace, so a retried batch re-sends the same
// votes.
var batchVoteNamespace = uuid.MustParse("5b0c2a3e-9d14-5f7a-8a61-3c1f0e4d2b97")

// BatchVoteID is the vote id a run batch with vote id batchID gives its
// vote on approval eventID.
func BatchVoteID(batchID, eventID string) string {
	return uuid.NewSHA1(batchVoteNamespace, []byte(batchID+"\n"+eventID)).String()
}

// batchVote is one vote of a selection: a vote body with its approval.
type batchVote struct {
	EventID string `json:"event_id"`
	voteBody
}

func (b *batchVote) body() voteBody { return b.voteBody }

// batchBody is the body of POST /v1/votes: votes, or run_id (with agent to
// narrow it) and vote.
type batchBody struct {
	Votes []batchVote `json:"votes"`
	RunID string      `json:"run_id"`
	Agent string      `json:"agent"`
	Vote  *voteBody   `json:"vote"`
}

// BatchResult is what came of one vote of a batch: Status is the HTTP
// status the vote alone would have been answered with (200 counted, 202 in
// flight, 4xx refused or invalid), Error its error.
type BatchResult struct {
	EventID string `json:"event_id"`
	VoteID  string `json:"vote_id,omitempty"`
	// Result is counted, in_flight or refused.
	Result string `json:"result"`
	Status int    `json:"status"`
	// ApprovalStatus and Revision are the record's after a counted vote.
	ApprovalStatus string `json:"approval_status,omitempty"`
	Revision       uint64 `json:"revision,omitempty"`
	Error          *Error `json:"error,omitempty"`
	// rec is the record after a counted vote, for the channels' resolver.
	rec *contracts.Record
}

// Batch result values.
const (
	BatchCounted  = "counted"
	BatchInFlight = "in_flight"
	BatchRefused  = "refused"
)

// BatchAnswer is the answer to POST /v1/votes.
type BatchAnswer struct {
	Results  []BatchResult `json:"results"`
	Counted  int           `json:"counted"`
	InFlight int           `json:"in_flight"`
	Refused  int           `json:"refused"`
	// Truncated: the run has more pending approvals than one batch casts;
	// send the batch again for the rest.
	Truncated bool `json:"truncated,omitempty"`
}

// postVotes answers POST /v1/votes.
func (s *Server) postVotes(w http.ResponseWriter, r *http.Request) {
	if !s.allow(w, s.voteRate, principalFrom(r.Context()), 1, "votes") {
		return
	}
	var body batchBody
	if aerr := decodeBody(w, r, &body, false); aerr != nil {
		writeError(w, aerr)
		return
	}
	ctx := r.Context()
	p := principalFrom(ctx)
	var items []batchItem
	truncated := false
	switch {
	case body.Votes != nil && (body.RunID != "" || body.Vote != nil || body.Agent != ""):
		writeError(w, fieldError(http.StatusBadRequest, CodeInvalidField, "votes", "give either votes, or run_id with vote, not both"))
		return
	case body.Votes != nil:
		var aerr *Error
		if items, aerr = s.selection(body.Votes); aerr != nil {
			writeError(w, aerr)
			return
		}
	case body.RunID != "" && body.Vote != nil:
		if aerr := s.checkVoteBody(body.Vote, "vote."); aerr != nil {
			writeError(w, aerr)
			return
		}
		var aerr *Error
		if items, truncated, aerr = s.runBatch(ctx, p, body.RunID, body.Agent, *body.Vote); aerr != nil {
			writeError(w, aerr)
			return
		}
	case body.RunID != "":
		writeError(w, fieldError(http.StatusBadRequest, CodeInvalidField, "vote", "with run_id, give the vote to cast on each pending approval of the run"))
		return
	default:
		writeError(w, fieldError(http.StatusBadRequest, CodeInvalidField, "votes", "give votes (each with its event_id), or run_id with vote"))
		return
	}
	// Each vote of the batch counts against the vote rate (the first was
	// taken on arrival).
	if len(items) > 1 && !s.allow(w, s.voteRate, p, len(items)-1, "votes") {
		return
	}
	ans := s.castBatch(ctx, p, items)
	ans.Truncated = truncated
	writeJSON(w, http.StatusOK, ans)
}

// batchItem is one vote of a batch, ready to cast, or already refused.
type batchItem struct {
	eventID string
	body    voteBody
	err     *Error
	// req is the approval's request, for a run batch (as listed).
	req *contracts.ApprovalRequested
}

// selection checks a batch's votes: the batch as a whole is refused when
// it is empty, too long, or names an approval twice; a vote that breaks a
// vote's rules is answered with its error in its place, and the others are
// cast.
func (s *Server) selection(votes []batchVote) ([]batchItem, *Error) {
	switch {
	case len(votes) == 0:
		return nil, fieldError(http.StatusBadRequest, CodeInvalidField, "votes", "votes is empty")
	case len(votes) > MaxBatchVotes:
		return nil, fieldError(http.StatusBadRequest, CodeInvalidField, "votes", "a batch casts at most %d votes (got %d)", MaxBatchVotes, len(votes))
	}
	seen := map[string]bool{}
	items := make([]batchItem, len(votes))
	for i := range votes {
		v := &votes[i]
		at := "votes[" + strconv.Itoa(i) + "]."
		if !contracts.ValidEventID(v.EventID) {
			return nil, fieldError(http.StatusBadRequest, CodeInvalidEventID, at+"event_id",
				"%sevent_id must be 1 to 64 characters of A-Z, a-z, 0-9, '-' and '_'", at)
		}
		if seen[v.EventID] {
			return nil, fieldError(http.StatusBadRequest, CodeInvalidField, at+"event_id", "approval %s is named twice; a batch casts one vote per approval", v.EventID)
		}
		seen[v.EventID] = true
		items[i] = batchItem{eventID: v.EventID, body: v.body()}
		items[i].err = s.checkVoteBody(&items[i].body, at)
	}
	return items, nil
}

// runBatch makes the votes of a run batch: vote on each pending approval
// of run runID (of agent, when given) that p may read and that names p
// among its approvers (or names none). With a vote_id, each vote's id is
// derived from it (BatchVoteID), and the approvals of the run that already
// carry their derived vote are reported again, so a retry answers the
// same.
func (s *Server) runBatch(ctx context.Context, p *Principal, runID, agent string, vote voteBody) ([]batchItem, bool, *Error) {
	if len(runID) > contracts.MaxClientIDBytes {
		return nil, false, fieldError(http.StatusBadRequest, CodeInvalidField, "run_id", "run_id is longer than %d bytes", contracts.MaxClientIDBytes)
	}
	if err := s.Settle(ctx); err != nil {
		s.log.Warn("records index is behind the bucket; deciding what it holds", "err", err)
	}
	f := listFilter{reader: p.Reader(), runID: runID, agent: agent, approver: p.Subject}
	if vote.VoteID == "" {
		f.statuses = []string{contracts.StatusPending}
	}
	// The whole run is read (bounded): a retried batch finds its votes on
	// approvals decided since.
	ids, _ := s.index.page(f, nil, 10*MaxBatchVotes)
	recs, aerr := s.fetchRecords(ctx, ids)
	if aerr != nil {
		return nil, false, aerr
	}
	var items []batchItem
	truncated := false
	for _, it := range recs {
		id := it.Record.Request.EventID
		b := vote
		if vote.VoteID != "" {
			b.VoteID = BatchVoteID(vote.VoteID, id)
		}
		if it.Record.Status != contracts.StatusPending && !hasVote(it.Record, b.VoteID) {
			continue
		}
		if len(items) == MaxBatchVotes {
			truncated = true
			break
		}
		items = append(items, batchItem{eventID: id, body: b, req: &it.Record.Request})
	}
	// Oldest first, as the agent proposed them.
	slices.Reverse(items)
	return items, truncated, nil
}

// hasVote reports whether rec holds the vote with id voteID, counted or refused.
func hasVote(rec *contracts.Record, voteID string) bool {
	return slices.ContainsFunc(rec.Votes, func(v contracts.Vote) bool { return v.VoteID == voteID }) ||
		slices.ContainsFunc(rec.RefusedVotes, func(v contracts.RefusedVote) bool { return v.VoteID == voteID })
}

// castBatch casts each vote of a batch as p through the single-vote path,
// a few at a time, and reports each result in the batch's order.
func (s *Server) castBatch(ctx context.Context, p *Principal, items []batchItem) BatchAnswer {
	ans := BatchAnswer{Results: make([]BatchResult, len(items))}
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	for i := range items {
		it := items[i]
		if it.err != nil {
			ans.Results[i] = BatchResult{EventID: it.eventID, VoteID: it.body.VoteID, Result: BatchRefused, Status: it.err.Status, Error: it.err}
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			a := s.vote(ctx, p, it.eventID, it.body)
			res := BatchResult{EventID: it.eventID, VoteID: a.voteID, Status: a.status, Error: a.err}
			switch {
			case a.err != nil:
				res.Result = BatchRefused
			case a.status == http.StatusAccepted:
				res.Result = BatchInFlight
			default:
				res.Result, res.ApprovalStatus, res.Revision, res.rec = BatchCounted, a.rec.Status, a.rev, a.rec
			}
			ans.Results[i] = res
		}()
	}
	wg.Wait()
	for _, r := range ans.Results {
		switch r.Result {
		case BatchCounted:
			ans.Counted++
		case BatchInFlight:
			ans.InFlight++
		default:
			ans.Refused++
		}
	}
	return ans
}
