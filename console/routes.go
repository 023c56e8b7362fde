package console

import (
	"net/http"
)

// routes builds the console's mux: its pages (GET), its actions (POST, past guard) and
// its static files, all under Options.Prefix.
func (c *Console) routes() {
	p := c.opts.Prefix
	mux := http.NewServeMux()
	mux.Handle("GET "+p+"/static/", http.StripPrefix(p, http.FileServerFS(staticFS)))
	mux.HandleFunc("GET "+p+"/{$}", c.overview)
	mux.HandleFunc("GET "+p+"/find", c.find)
	mux.HandleFunc("GET "+p+"/mounts/{name}", c.mountPage)
	mux.HandleFunc("GET "+p+"/mounts/{name}/dead/{id}", c.deadLetterPage)
	mux.HandleFunc("GET "+p+"/mounts/{name}/pending/{id}", c.pendingPage)
	mux.HandleFunc("GET "+p+"/mounts/{name}/delayed", c.delayedPage)
	mux.HandleFunc("GET "+p+"/mounts/{name}/dead/{id}/payload", c.payloadDownload)
	mux.HandleFunc("GET "+p+"/partitioned/{name}", c.partitionedPage)
	mux.HandleFunc("GET "+p+"/inboxes/{name}", c.inboxPage)
	mux.HandleFunc("GET "+p+"/inboxes/{name}/dead/{dead}/{id}", c.deadRowPage)
	mux.HandleFunc("POST "+p+"/mounts/{name}/{action}", c.guard(c.mountAction))
	mux.HandleFunc("POST "+p+"/inboxes/{name}/{action}", c.guard(c.inboxAction))
	mux.HandleFunc("POST "+p+"/", c.guard(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "No such action", errNotFound("action", r.URL.Path))
	}))
	if p != "" {
		mux.Handle("GET "+p, http.RedirectHandler(p+"/", http.StatusMovedPermanently))
	}
	c.mux = mux
}
