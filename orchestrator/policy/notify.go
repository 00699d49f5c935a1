package policy

import (
	"cmp"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts"
)

// This file reads a rule's notify: its routes in order, each told after
// its delay if the request is still pending and the person has not opened
// it (a staggered notification; channels: is told at once):
//
//	notify:
//	  - channel: push
//	  - channel: slack
//	    after: 5m
//	  - channel: email
//	    after: 30m

// notifyKeys are the keys of one stage.
var notifyKeys = []string{"channel", "after"}

// maxNotifyStages bounds a rule's stages.
const maxNotifyStages = 10

// readNotifyField reads notify into g.
func readNotifyField(g *gateSpec, f field, what string, ps *problems) {
	seq := resolve(f.val)
	if isNull(seq) {
		return
	}
	if seq.Kind != yaml.SequenceNode {
		ps.add(f.val.Line, f.val.Column, SeverityError, "%s must be a list of stages, each with a channel and an optional after", what)
		return
	}
	stages := []contracts.NotifyStage{}
	var last time.Duration
	seen := map[string]bool{}
	for i, item := range seq.Content {
		if i == maxNotifyStages {
			ps.add(item.Line, item.Column, SeverityError, "%s: at most %d stages", what, maxNotifyStages)
			break
		}
		stageWhat := what + "[" + itoa(i) + "]"
		s, after, ok := readNotifyStage(item, stageWhat, g.where, ps)
		if !ok {
			continue
		}
		switch {
		case after < last:
			ps.add(item.Line, item.Column, SeverityError, "%s.after: %s is before the stage before it (%s); list stages in the order they are told",
				stageWhat, shortDuration(after), shortDuration(last))
			continue
		case seen[s.Channel]:
			ps.add(item.Line, item.Column, SeverityError, "%s: channel %q is listed twice", stageWhat, s.Channel)
			continue
		}
		last, seen[s.Channel] = after, true
		stages = append(stages, s)
	}
	g.notify, g.notifySet = stages, true
}

// readNotifyStage reads one stage and its delay.
func readNotifyStage(n *yaml.Node, what, where string, ps *problems) (contracts.NotifyStage, time.Duration, bool) {
	var s contracts.NotifyStage
	if resolve(n).Kind != yaml.MappingNode {
		ps.add(n.Line, n.Column, SeverityError, "%s must be a mapping with channel and an optional after", what)
		return s, 0, false
	}
	var after time.Duration
	ok := true
	fs := ps.fields(n, what)
	for _, f := range fs {
		switch f.name() {
		case "channel":
			s.Channel = ps.str(f.val, what+".channel")
			if _, err := contracts.ParseRoute(s.Channel); err != nil {
				ps.add(f.val.Line, f.val.Column, SeverityError, "%s: %v", where, err)
				ok = false
			}
		case "after":
			d, good := ps.duration(f.val, what+".after") // positive; leave after out for at once
			after, ok = d, ok && good
			if good {
				s.After = shortDuration(d)
			}
		default:
			ps.unknownField(f, what, notifyKeys)
			ok = false
		}
	}
	if !hasKey(fs, "channel") {
		ps.add(n.Line, n.Column, SeverityError, "%s: channel is required (a route, such as push or slack:#payments)", what)
		ok = false
	}
	return s, after, ok
}

// unionStages is the stages of a and b, each route once at its earlier
// delay, in the order they are told: the strictest of two decisions tells
// everyone either would, as soon as either would.
func unionStages(a, b []contracts.NotifyStage) []contracts.NotifyStage {
	if len(b) == 0 {
		return a
	}
	out := slices.Clone(a)
	for _, s := range b {
		i := slices.IndexFunc(out, func(x contracts.NotifyStage) bool { return x.Channel == s.Channel })
		switch {
		case i < 0:
			out = append(out, s)
		case s.Delay() < out[i].Delay():
			out[i] = s
		}
	}
	slices.SortStableFunc(out, func(x, y contracts.NotifyStage) int { return cmp.Compare(x.Delay(), y.Delay()) })
	return out
}
