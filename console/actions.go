package console

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/settlekit/settle/admin"
)

// confirmPage asks again before a replay or a purge, saying how many entries it moves.
type confirmPage struct {
	// Action is the form's target.
	Action string
	// Back is the page to go back to.
	Back string
	// Count is how many entries the action moves (or deletes).
	Count int
	// Fields are the form's fields to send again, confirm=yes added.
	Fields []header
	// IDs are the first of the entries, for a person to check.
	IDs []string
	// More is how many entries IDs does not show.
	More int
	// Verb is what the action does ("Replay", "Purge").
	Verb string
	// What says what moves where.
	What string
}

// resultPage shows what an action did.
type resultPage struct {
	// Back is the page to go back to.
	Back string
	// Lines say what was done, one thing a line.
	Lines []string
	// Summary says it in one line.
	Summary string
}

// shownIDs is how many ids a confirmation lists.
const shownIDs = 20

// mountAction serves the POST actions of a Redis mount (past guard): replay, purge,
// pause, resume, promote.
func (c *Console) mountAction(w http.ResponseWriter, r *http.Request) {
	m, ok := c.mount(r.PathValue("name"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such mount", errNotFound("mount", r.PathValue("name")))
		return
	}
	back := c.path("mounts", m.Name)
	ctx := r.Context()
	insp := c.opts.Admin
	switch action := r.PathValue("action"); action {
	case "replay", "purge":
		if m.DeadLetter == "" {
			c.fail(w, r, http.StatusBadRequest, "No dead letter", fmt.Errorf("mount %q names no dead letter", m.Name))
			return
		}
		c.deadAction(w, r, m, action, back)
	case "pause", "resume":
		group := ""
		if m.isStream() {
			group = m.Group
		}
		act, verb := insp.Pause, "Paused"
		if action == "resume" {
			act, verb = insp.Resume, "Resumed"
		}
		if err := act(ctx, m.Key, group); err != nil {
			c.fail(w, r, http.StatusBadRequest, action+" "+m.Name+" refused", err)
			return
		}
		c.log.Info("settle console: "+action, "mount", m.Name, "key", m.Key, "group", group)
		c.result(w, r, m.Name, resultPage{Back: back, Summary: fmt.Sprintf("%s mount %s (%s): its consumers see it within a second.", verb, m.Name, m.Key)})
	case "release", "dead-pending":
		if !m.isStream() || (action == "dead-pending" && m.DeadLetter == "") {
			c.fail(w, r, http.StatusBadRequest, action+" refused", fmt.Errorf("mount %q has no pending entries to %s (a stream kind%s)", m.Name, action, map[bool]string{true: " with a dead letter", false: ""}[action == "dead-pending"]))
			return
		}
		c.pendingAction(w, r, m, action, back)
	case "promote":
		c.promoteAction(w, r, m, back)
	default:
		c.fail(w, r, http.StatusNotFound, "No such action", errNotFound("action", action))
	}
}

// deadAction replays or purges the dead letters of m the form selects: first a dry run
// and a confirmation naming how many, then, with confirm=yes, the action itself.
func (c *Console) deadAction(w http.ResponseWriter, r *http.Request, m Mount, action, back string) {
	sel, pk, err := selection(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, action+" refused", err)
		return
	}
	fields, rate := pk.Fields, pk.Rate
	st := c.deadLetters(m)
	ctx := r.Context()
	confirmed := r.PostFormValue("confirm") == "yes"
	shown := admin.Selection{Filter: sel}
	if confirmed {
		if err := readBound(r, &shown); err != nil {
			c.fail(w, r, http.StatusBadRequest, action+" refused", err)
			return
		}
	}
	if action == "purge" {
		var opts []admin.PurgeOption
		if !confirmed {
			opts = append(opts, admin.DryRun())
		}
		res, err := st.Purge(ctx, shown, opts...)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, "Purge refused", err)
			return
		}
		if !confirmed {
			c.confirm(w, r, m.Name, confirmPage{
				Action: c.path("mounts", m.Name, "purge"), Back: back, Count: len(res.IDs), Fields: append(fields, boundFields(res.Selection)...), IDs: res.IDs, Verb: "Purge",
				What: fmt.Sprintf("delete %s from %s, for good", countOf(len(res.IDs), "dead letter"), m.DeadLetter),
			})
			return
		}
		c.log.Info("settle console: purge", "mount", m.Name, "key", m.DeadLetter, "deleted", res.Deleted, "gone_meanwhile", res.Meanwhile)
		c.result(w, r, m.Name, resultPage{Back: back, Lines: res.IDs,
			Summary: fmt.Sprintf("Purged %s of the %d confirmed from %s.%s", countOf(int(res.Deleted), "dead letter"), shown.Count, m.DeadLetter, meanwhileNote(res.Meanwhile))})
		return
	}
	opts := []admin.ReplayOption{admin.Rate(rate)}
	if !confirmed {
		opts = append(opts, admin.DryRun())
	}
	res, err := st.Replay(ctx, shown, opts...)
	if err != nil && res == nil {
		c.fail(w, r, http.StatusBadRequest, "Replay refused", err)
		return
	}
	ids := make([]string, len(res.Replayed))
	dests := map[string]bool{}
	for k, rp := range res.Replayed {
		ids[k] = rp.ID
		dests[rp.To] = true
	}
	if !confirmed {
		c.confirm(w, r, m.Name, confirmPage{
			Action: c.path("mounts", m.Name, "replay"), Back: back, Count: len(ids), Fields: append(fields, boundFields(res.Selection)...), IDs: ids, Verb: "Replay",
			What: fmt.Sprintf("move %s from %s back to %s%s, attempts reset", countOf(len(ids), "dead letter"), m.DeadLetter, keysOf(dests), rateOf(rate)),
		})
		return
	}
	rp := resultPage{Back: back, Summary: fmt.Sprintf("Replayed %s of the %d confirmed from %s.%s", countOf(len(res.Replayed), "dead letter"), shown.Count, m.DeadLetter, meanwhileNote(res.Meanwhile))}
	for _, x := range res.Replayed {
		rp.Lines = append(rp.Lines, fmt.Sprintf("%s → %s %s", x.ID, x.To, x.NewID))
	}
	for _, id := range res.Gone {
		rp.Lines = append(rp.Lines, id+" was gone (replayed or purged meanwhile)")
	}
	if err != nil {
		rp.Summary += " It stopped: " + err.Error() + " Run it again to move the rest."
	}
	c.log.Info("settle console: replay", "mount", m.Name, "key", m.DeadLetter, "replayed", len(res.Replayed), "gone_meanwhile", res.Meanwhile)
	c.result(w, r, m.Name, rp)
}

// meanwhileNote says how many of the confirmed were gone when the action came.
func meanwhileNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" %d of them were gone meanwhile (replayed or purged by another hand).", n)
}

// picked is what an action's form selects: the ids ticked (scope "selected", the
// default) or all the filter box selects (scope "matching").
type picked struct {
	// Fields are the form's fields that say so again, for the confirmation.
	Fields []header
	// Filter is the filter box, its cursor cleared (Matching).
	Filter filterForm
	// IDs are the ids ticked (not Matching).
	IDs []string
	// Matching reports scope "matching".
	Matching bool
	// Rate is the replay's rate (entries a second; 0: no bound).
	Rate float64
}

// pick reads what the form of r selects; nothing ticked with scope "selected" is an
// error saying what to do.
func pick(r *http.Request, noun string) (picked, error) {
	p := picked{Matching: r.PostFormValue("scope") == "matching"}
	var err error
	if p.Rate, err = readRate(r); err != nil {
		return p, err
	}
	p.Fields = []header{{"scope", r.PostFormValue("scope")}}
	if v := r.PostFormValue("rate"); v != "" {
		p.Fields = append(p.Fields, header{"rate", v})
	}
	if p.Matching {
		p.Filter = readFilter(r)
		p.Filter.After = ""
		for _, kv := range []header{{"reason", p.Filter.Reason}, {"error", p.Filter.Error}, {"since", p.Filter.Since}, {"until", p.Filter.Until}} {
			if kv.Value != "" {
				p.Fields = append(p.Fields, kv)
			}
		}
		return p, nil
	}
	p.IDs = r.PostForm["id"]
	if len(p.IDs) == 0 {
		return p, fmt.Errorf("no %s is selected: tick the ones to act on, or act on all that match the filter", noun)
	}
	for _, id := range p.IDs {
		p.Fields = append(p.Fields, header{"id", id})
	}
	return p, nil
}

// selection reads which dead letters the form selects, as an admin.Filter, and the
// fields that say so again.
func selection(r *http.Request) (admin.Filter, picked, error) {
	p, err := pick(r, "dead letter")
	if err != nil || !p.Matching {
		return admin.Filter{IDs: p.IDs}, p, err
	}
	f, err := adminFilter(p.Filter)
	return f, p, err
}

// readRate reads the form's rate (dead letters a second; "" or 0: no bound).
func readRate(r *http.Request) (float64, error) {
	v := strings.TrimSpace(r.PostFormValue("rate"))
	if v == "" {
		return 0, nil
	}
	rate, err := strconv.ParseFloat(v, 64)
	if err != nil || rate < 0 {
		return 0, fmt.Errorf("rate %q is not a number of entries a second (0 or more)", v)
	}
	return rate, nil
}

// confirm renders the confirmation p of an action on the page named name.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request, name string, p confirmPage) {
	if len(p.IDs) > shownIDs {
		p.More, p.IDs = len(p.IDs)-shownIDs, p.IDs[:shownIDs]
	}
	c.render(w, r, http.StatusOK, "confirm", page{Title: p.Verb + "?", Data: p,
		Crumbs: []crumb{{c.path(), "Overview"}, {p.Back, name}}})
}

// result renders what an action did.
func (c *Console) result(w http.ResponseWriter, r *http.Request, name string, p resultPage) {
	c.render(w, r, http.StatusOK, "result", page{Title: "Done", Data: p,
		Crumbs: []crumb{{c.path(), "Overview"}, {p.Back, name}}})
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// countOf is "1 dead letter", "3 dead letters".
func countOf(n int, noun string) string { return fmt.Sprintf("%d %s", n, plural(n, noun, noun+"s")) }

func keysOf(set map[string]bool) string {
	if len(set) == 0 {
		return "their sources"
	}
	return strings.Join(slices.Sorted(maps.Keys(set)), ", ")
}

func rateOf(rate float64) string {
	if rate <= 0 {
		return ""
	}
	return fmt.Sprintf(" at %g a second", rate)
}

// pendingAction releases or dead-letters the pending entries of m's group the form
// selects (ids; scope "consumer": every entry one consumer holds; scope "all": every
// pending entry): first a confirmation naming the ids read now, then, with
// confirm=yes, the action on exactly those ids.
func (c *Console) pendingAction(w http.ResponseWriter, r *http.Request, m Mount, action, back string) {
	ctx := r.Context()
	ids := r.PostForm["id"]
	if r.PostFormValue("confirm") != "yes" && len(ids) == 0 {
		consumer := ""
		switch r.PostFormValue("scope") {
		case "consumer":
			if consumer = r.PostFormValue("consumer"); consumer == "" {
				c.fail(w, r, http.StatusBadRequest, action+" refused", fmt.Errorf("name the consumer"))
				return
			}
		case "all":
		default:
			c.fail(w, r, http.StatusBadRequest, action+" refused", fmt.Errorf("select entries: ids, a consumer's, or all"))
			return
		}
		var err error
		if ids, err = c.opts.Admin.PendingIDs(ctx, m.Key, m.Group, consumer); err != nil {
			c.fail(w, r, http.StatusBadGateway, "Cannot read the pending entries of "+m.Name, err)
			return
		}
	}
	if len(ids) == 0 {
		c.fail(w, r, http.StatusBadRequest, action+" refused", fmt.Errorf("nothing is pending there"))
		return
	}
	verb, what := "Release", fmt.Sprintf("release %s of %s group %s to the group: the next reclaim takes them, no attempt spent", entries(len(ids)), m.Key, m.Group)
	if action == "dead-pending" {
		verb, what = "Dead-letter", fmt.Sprintf("dead-letter %s of %s group %s to %s now", entries(len(ids)), m.Key, m.Group, m.DeadLetter)
	}
	if r.PostFormValue("confirm") != "yes" {
		fields := make([]header, len(ids))
		for k, id := range ids {
			fields[k] = header{"id", id}
		}
		c.confirm(w, r, m.Name, confirmPage{Action: c.path("mounts", m.Name, action), Back: back, Count: len(ids), Fields: fields, IDs: ids, Verb: verb, What: what})
		return
	}
	rp := resultPage{Back: back}
	if action == "dead-pending" {
		res, err := c.opts.Admin.DeadLetterPending(ctx, m.Key, m.Group, ids, m.DeadLetter)
		if err != nil && res == nil {
			c.fail(w, r, http.StatusBadRequest, verb+" refused", err)
			return
		}
		for _, d := range res.DeadLettered {
			rp.Lines = append(rp.Lines, d.ID+" → "+d.DeadID)
		}
		rp.Summary = fmt.Sprintf("Dead-lettered %s of the %d confirmed to %s.%s", entries(len(res.DeadLettered)), len(ids), m.DeadLetter, meanwhileNote(len(res.Gone)))
	} else {
		res, err := c.opts.Admin.ReleasePending(ctx, m.Key, m.Group, ids)
		if err != nil && res == nil {
			c.fail(w, r, http.StatusBadRequest, verb+" refused", err)
			return
		}
		for _, p := range res.Released {
			rp.Lines = append(rp.Lines, p.ID+" released from "+p.Consumer)
		}
		rp.Summary = fmt.Sprintf("Released %s of the %d confirmed.%s", entries(len(res.Released)), len(ids), meanwhileNote(len(res.Gone)))
	}
	c.log.Info("settle console: "+action, "mount", m.Name, "key", m.Key, "group", m.Group, "entries", len(ids))
	c.result(w, r, m.Name, rp)
}

// entries is "1 pending entry", "3 pending entries".
func entries(n int) string {
	return fmt.Sprintf("%d %s", n, plural(n, "pending entry", "pending entries"))
}

// maxPromoteAll bounds the members "promote all" names in its confirmation: past it, the
// earliest due are promoted and the confirmation says how many remain.
const maxPromoteAll = 10_000

// promoteAction promotes the members of m's delay set the form names (member, ticked or
// one), or all of them (scope "all": the earliest maxPromoteAll): first a confirmation
// naming them, then, with confirm=yes, Promote on exactly those members.
func (c *Console) promoteAction(w http.ResponseWriter, r *http.Request, m Mount, back string) {
	ctx := r.Context()
	insp := c.opts.Admin
	handles := r.PostForm["member"]
	if m.Delayed == "" {
		c.fail(w, r, http.StatusBadRequest, "Nothing to promote", fmt.Errorf("mount %q has no delay set", m.Name))
		return
	}
	more := int64(0)
	if r.PostFormValue("scope") == "all" && r.PostFormValue("confirm") != "yes" {
		members, err := insp.DelayedMembers(ctx, m.Delayed, maxPromoteAll)
		if err != nil {
			c.fail(w, r, http.StatusBadGateway, "Cannot read the delay set of "+m.Name, err)
			return
		}
		handles = handles[:0]
		for _, d := range members {
			handles = append(handles, d.Handle)
		}
		if info, err := insp.DelaySet(ctx, m.Delayed); err == nil {
			more = info.Size - int64(len(handles))
		}
	}
	if len(handles) == 0 {
		c.fail(w, r, http.StatusBadRequest, "Nothing to promote", fmt.Errorf("tick members of the delay set of mount %q, or promote all", m.Name))
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		fields := make([]header, len(handles))
		for k, h := range handles {
			fields[k] = header{"member", h}
		}
		what := fmt.Sprintf("make %s of %s due now: the next read sweeps them back", countOf(len(handles), "delayed retry"), m.Delayed)
		if more > 0 {
			what += fmt.Sprintf(" (%d more, due later, stay)", more)
		}
		c.confirm(w, r, m.Name, confirmPage{Action: c.path("mounts", m.Name, "promote"), Back: back, Count: len(handles), Fields: fields, IDs: handles, Verb: "Promote", What: what})
		return
	}
	res, err := insp.Promote(ctx, m.Delayed, admin.DelayFilter{Members: handles})
	if errors.Is(err, admin.ErrMemberNotFound) {
		// Swept or cancelled since the confirmation: promote those still there.
		res, err = c.promoteThere(r, m, handles)
	}
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "Promote refused", err)
		return
	}
	c.log.Info("settle console: promote", "mount", m.Name, "key", m.Delayed, "promoted", len(res.Done))
	rp := resultPage{Back: back, Summary: fmt.Sprintf("Promoted %d delayed %s of the %d confirmed, of %s: due now, swept back by the next read.%s", len(res.Done), plural(len(res.Done), "retry", "retries"), len(handles), m.Delayed, meanwhileNote(len(res.Gone)))}
	for _, d := range res.Done {
		rp.Lines = append(rp.Lines, "promoted "+d.Handle)
	}
	for _, h := range res.Due {
		rp.Lines = append(rp.Lines, h+" was due already")
	}
	for _, h := range res.Gone {
		rp.Lines = append(rp.Lines, h+" was gone (swept back or cancelled)")
	}
	c.result(w, r, m.Name, rp)
}

// promoteThere promotes those of handles still in m's delay set (read once, as Promote
// reads it), the others reported gone.
func (c *Console) promoteThere(r *http.Request, m Mount, handles []string) (*admin.DelayResult, error) {
	members, err := c.opts.Admin.DelayedMembers(r.Context(), m.Delayed, 0)
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, d := range members {
		held[d.Handle], held[d.Member] = true, true
	}
	var there, gone []string
	for _, h := range handles {
		if held[h] {
			there = append(there, h)
		} else {
			gone = append(gone, h)
		}
	}
	res := &admin.DelayResult{Key: m.Delayed}
	if len(there) > 0 {
		if res, err = c.opts.Admin.Promote(r.Context(), m.Delayed, admin.DelayFilter{Members: there}); err != nil {
			return nil, err
		}
	}
	res.Gone = append(res.Gone, gone...)
	return res, nil
}
