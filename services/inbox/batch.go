package inbox

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/services/api"
)

// Batch decisions in the inbox: the list and a run's page let a person
// select several requests (or take every request of the run they may
// decide) and approve or reject them at once. Each vote goes the way a
// single decision goes (the API's vote path, decided by the arbiter on its
// own approval), and the answer says what became of each.

// maxBatch is the most requests one batch form decides.
const maxBatch = api.MaxBatchVotes

// batchParallel is how many votes of a batch wait for the arbiter at once.
const batchParallel = 8

// batchRow is the result of one vote of a batch, for people.
type batchRow struct {
	EventID string
	Summary string
	// Result is counted, in_flight or refused; Text says it in words.
	Result string
	Text   string
}

type batchPage struct {
	Page
	Decision string
	Rows     []batchRow
	Counted  int
	Refused  int
	Back     string
}

// getRun serves GET /runs/{run_id}[?agent=]: the requests of one run,
// pending first, with "Approve all N of this run".
func (in *Inbox) getRun(w http.ResponseWriter, r *http.Request, sess *session) {
	runID := r.PathValue("run_id")
	agent := r.URL.Query().Get("agent")
	pg := listPage{Page: in.pageFor(sess, "Run "+runID, ""), RunID: runID, RunAgent: agent, Back: r.URL.RequestURI()}
	recs, aerr := in.api.Records(r.Context(), sess.p, api.Query{Limit: inboxListLimit, RunID: runID})
	if aerr != nil {
		in.message(w, aerr.Status, sess, aerr.Message)
		return
	}
	now := in.now()
	var decided []row
	for _, rec := range recs {
		if agent != "" && rec.Request.Run.Agent != agent {
			continue
		}
		rw := in.row(rec, &sess.p, now)
		if rec.Terminal() {
			decided = append(decided, rw)
			continue
		}
		pg.Rows = append(pg.Rows, rw)
		if rw.Mine {
			pg.MineCount++
		}
	}
	pg.Rows = append(pg.Rows, decided...)
	if len(pg.Rows) == 0 {
		in.message(w, http.StatusNotFound, sess, "There is no run "+runID+" among the requests you may see.")
		return
	}
	if r.URL.Query().Get("fragment") == "rows" {
		in.renderTemplate(w, http.StatusOK, "list", "rows", pg)
		return
	}
	in.render(w, http.StatusOK, "list", pg)
}

// postBatch serves POST /decide: form fields csrf, decision (approve or
// reject), comment, back (the page to return to), event_id (repeated: the
// requests decided) and h.<event_id> (the arguments' SHA-256 shown for
// each). The result of every vote is shown on the answer page.
func (in *Inbox) postBatch(w http.ResponseWriter, r *http.Request, sess *session) {
	f := r.PostForm
	decision := f.Get("decision")
	ids := slices.Compact(slices.Sorted(slices.Values(f["event_id"])))
	pg := batchPage{Page: in.pageFor(sess, "Decisions", ""), Decision: decision, Back: localPath(f.Get("back"))}
	switch {
	case decision != contracts.DecisionApprove && decision != contracts.DecisionReject:
		in.message(w, http.StatusBadRequest, sess, "Unknown decision: a batch approves or rejects.")
		return
	case len(ids) == 0:
		in.message(w, http.StatusBadRequest, sess, "Select the requests to decide first.")
		return
	case len(ids) > maxBatch:
		in.message(w, http.StatusBadRequest, sess, "Select at most 100 requests at once.")
		return
	case !sess.p.Has(api.RoleApprover):
		in.message(w, http.StatusForbidden, sess, "Your token cannot vote: it lacks the approver role.")
		return
	}
	comment := strings.TrimSpace(f.Get("comment"))
	if len(comment) > contracts.MaxCommentBytes {
		in.message(w, http.StatusBadRequest, sess, "The comment must be at most 16 KiB.")
		return
	}
	pg.Rows = make([]batchRow, len(ids))
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			pg.Rows[i] = in.batchVote(r.Context(), sess, id, decision, comment, f.Get("h."+id))
		}()
	}
	wg.Wait()
	for _, rw := range pg.Rows {
		if rw.Result == api.BatchCounted {
			pg.Counted++
		} else if rw.Result == api.BatchRefused {
			pg.Refused++
		}
	}
	in.log.Info("inbox batch vote", "approver", sess.p.Subject, "decision", decision, "votes", len(ids), "counted", pg.Counted, "refused", pg.Refused)
	in.render(w, http.StatusOK, "batch", pg)
}

// batchVote casts one vote of a batch as the signed-in person, via the web,
// on a request they may read.
func (in *Inbox) batchVote(ctx context.Context, sess *session, id, decision, comment, sha string) batchRow {
	out := batchRow{EventID: id, Summary: id, Result: api.BatchRefused}
	if !contracts.ValidEventID(id) {
		out.Text = "There is no such approval."
		return out
	}
	rec, aerr := in.api.Record(ctx, sess.p, id, 0)
	if aerr != nil {
		out.Text = aerr.Message
		return out
	}
	out.Summary = rec.Request.Summary
	if out.Summary == "" {
		out.Summary = notifier.Title(&rec.Request)
	}
	v := contracts.Vote{
		Spec: contracts.SpecVote, VoteID: uuid.Must(uuid.NewV7()).String(), EventID: id, Decision: decision,
		Approver: contracts.Approver{ID: sess.p.Subject, Via: contracts.ViaWeb}, Comment: comment,
		DecidedAt: in.now().UTC(), ApproverTenants: sess.p.Tenants,
	}
	if decision == contracts.DecisionApprove {
		v.ArgumentsSHA256 = sha
	}
	res, err := in.api.Resolver().Vote(ctx, v)
	switch {
	case err != nil:
		out.Text = "Your vote could not be sent; try again shortly."
	case res.InFlight:
		out.Result, out.Text = api.BatchInFlight, "Sent; the decision is still being recorded."
	case res.Refused != "":
		out.Text = "Refused: " + contracts.Reason(res.Refused).Message() + "."
	default:
		out.Result, out.Text = api.BatchCounted, counted(decision)
		if res.Record != nil && res.Record.Terminal() {
			out.Text += " " + notifier.OutcomeLine(res.Record) + "."
		}
	}
	return out
}
