package orchestrator

import (
	"context"

	"github.com/countersign/countersign/contracts"
)

type submitterKey struct{}

// WithSubmitter returns ctx carrying who submits the requests reviewed
// with it (the HTTP API passes the subject of the agent's token). Each
// request names its submitter, and that identity may read it back.
func WithSubmitter(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, submitterKey{}, who)
}

func submitterFrom(ctx context.Context) string {
	s, _ := ctx.Value(submitterKey{}).(string)
	return s
}

// sameSubmitter reports whether the requests reviewed with ctx may learn
// how rec's own request compares: a review without a submitter (a runner
// with the orchestrator's credential, which reads every record), and any
// review of a request published without one, may; a review by a submitter
// may only for the requests it submitted itself.
func sameSubmitter(ctx context.Context, rec *contracts.Record) bool {
	who := submitterFrom(ctx)
	return who == "" || rec.Request.Submitter == "" || who == rec.Request.Submitter
}
