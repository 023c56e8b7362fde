package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/settlekit/settle/admin"
)

// inboxAction serves the POST actions of an inbox (past guard): replay and purge of a
// dead letter's rows, pause and resume of a group.
func (c *Console) inboxAction(w http.ResponseWriter, r *http.Request) {
	ib, ok := c.inbox(r.PathValue("name"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such inbox", errNotFound("inbox", r.PathValue("name")))
		return
	}
	back := c.path("inboxes", ib.Name)
	ctx := r.Context()
	switch action := r.PathValue("action"); action {
	case "pause", "resume":
		group := r.PostFormValue("group")
		if !slices.Contains(ib.Groups, group) {
			c.fail(w, r, http.StatusBadRequest, action+" refused", errNotFound("group of inbox "+ib.Name, group))
			return
		}
		act, verb := ib.Inbox.Pause, "Paused"
		if action == "resume" {
			act, verb = ib.Inbox.Resume, "Resumed"
		}
		if err := act(ctx, group); err != nil {
			c.fail(w, r, http.StatusBadRequest, action+" refused", err)
			return
		}
		c.log.Info("settle console: "+action, "inbox", ib.Name, "group", group)
		c.result(w, r, ib.Name, resultPage{Back: back, Summary: fmt.Sprintf("%s group %q of inbox %s: its mounts see it within a second.", verb, group, ib.Name)})
	case "replay", "purge":
		c.deadRowAction(w, r, ib, action)
	default:
		c.fail(w, r, http.StatusNotFound, "No such action", errNotFound("action", action))
	}
}

// deadRowAction replays or purges the rows of an inbox's dead letter the form selects:
// a dry run and a confirmation naming how many first, then with confirm=yes the action.
func (c *Console) deadRowAction(w http.ResponseWriter, r *http.Request, ib Inbox, action string) {
	dead := r.PostFormValue("dead")
	back := c.path("inboxes", ib.Name) + "?dead=" + url.QueryEscape(dead)
	if !slices.Contains(ib.Dead, dead) {
		c.fail(w, r, http.StatusBadRequest, action+" refused", errNotFound("dead letter of inbox "+ib.Name, dead))
		return
	}
	f, pk, err := rowSelection(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, action+" refused", err)
		return
	}
	fields, rate := append(pk.Fields, header{"dead", dead}), pk.Rate
	to := r.PostFormValue("to")
	if action == "replay" && ib.Inbox.Table().Group != "" {
		if !slices.Contains(ib.Groups, to) {
			c.fail(w, r, http.StatusBadRequest, "Replay refused", fmt.Errorf("choose the group to replay the rows to (one of the inbox's groups), not %q", to))
			return
		}
		fields = append(fields, header{"to", to})
	}
	st := admin.TableDeadLetters(ib.Inbox, dead, to)
	confirmed := r.PostFormValue("confirm") == "yes"
	shown := admin.Selection{Filter: f}
	if confirmed {
		if err := readBound(r, &shown); err != nil {
			c.fail(w, r, http.StatusBadRequest, action+" refused", err)
			return
		}
	}
	ctx := r.Context()
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
			c.confirm(w, r, ib.Name, confirmPage{
				Action: c.path("inboxes", ib.Name, "purge"), Back: back, Count: len(res.IDs), Fields: append(fields, boundFields(res.Selection)...), IDs: res.IDs, Verb: "Purge",
				What: fmt.Sprintf("delete %s from %s of %s, for good", countOf(len(res.IDs), "dead row"), dead, ib.Name),
			})
			return
		}
		c.log.Info("settle console: purge", "inbox", ib.Name, "dead", dead, "deleted", res.Deleted, "gone_meanwhile", res.Meanwhile)
		c.result(w, r, ib.Name, resultPage{Back: back, Lines: res.IDs, Summary: fmt.Sprintf("Purged %s of the %d confirmed from %s.%s", countOf(int(res.Deleted), "dead row"), shown.Count, dead, meanwhileNote(res.Meanwhile))})
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
	for k, x := range res.Replayed {
		ids[k] = x.ID
	}
	if !confirmed {
		c.confirm(w, r, ib.Name, confirmPage{
			Action: c.path("inboxes", ib.Name, "replay"), Back: back, Count: len(ids), Fields: append(fields, boundFields(res.Selection)...), IDs: ids, Verb: "Replay",
			What: fmt.Sprintf("move %s from %s back to %s%s, attempts reset", countOf(len(ids), "dead row"), dead, groupName(to), rateOf(rate)),
		})
		return
	}
	rp := resultPage{Back: back, Lines: ids, Summary: fmt.Sprintf("Replayed %s of the %d confirmed from %s to %s.%s", countOf(len(ids), "dead row"), shown.Count, dead, groupName(to), meanwhileNote(res.Meanwhile))}
	for _, id := range res.Gone {
		rp.Lines = append(rp.Lines, id+" was gone (replayed or purged meanwhile)")
	}
	if err != nil {
		rp.Summary += " It stopped: " + err.Error() + " Run it again to move the rest."
	}
	c.log.Info("settle console: replay", "inbox", ib.Name, "dead", dead, "replayed", len(ids), "gone_meanwhile", res.Meanwhile)
	c.result(w, r, ib.Name, rp)
}

// rowSelection reads which dead rows the form selects, as an admin.Filter (the filter
// language of every dead letter), and the fields that say so again.
func rowSelection(r *http.Request) (admin.Filter, picked, error) {
	p, err := pick(r, "row")
	if err != nil || !p.Matching {
		return admin.Filter{IDs: p.IDs}, p, err
	}
	f, err := inboxFilter(p.Filter)
	if err != nil {
		return admin.Filter{}, p, err
	}
	return admin.Filter{Error: f.Error, Since: f.Since, Until: f.Until, Reason: p.Filter.Reason}, p, nil
}

// groupName names group for a person.
func groupName(group string) string {
	if group == "" {
		return "the inbox's table"
	}
	return fmt.Sprintf("group %q", group)
}
