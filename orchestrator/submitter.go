package orchestrator

import "context"

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
