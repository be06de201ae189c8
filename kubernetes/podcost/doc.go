// Package podcost keeps the annotation controller.kubernetes.io/pod-deletion-cost of a worker's own
// pod equal to the number of queues the worker leads, so that when a Deployment scales in, the
// ReplicaSet controller removes the followers first and the leaders last: every queue whose leader
// is removed moves once more (a hand-over of its dispatcher), and a follower's removal moves none.
//
// It talks to the Kubernetes API with plain net/http and the pod's service-account token, as a
// process inside the cluster does (the token, ca.crt and namespace files of
// DefaultServiceAccountDir; the API server at KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT):
// one GET of its pod at the first write, then a JSON merge patch of the annotation whenever the
// number changes, at most once per Config.MinInterval (the API server's docs ask not to update the
// annotation often). Its service account needs get and patch on pods in its namespace, nothing more
// (deploy/kubernetes/components/pod-deletion-cost grants exactly that). client-go is not used, so
// that applications importing Baton do not inherit it.
//
// The annotation is advice to the controller, never a condition of leadership: an Updater only reads
// the count it is given, and a refused or failed write changes nothing else. A failure is logged once
// (again only when it changes, and once more when writes succeed again) and retried with a backoff
// up to Config.MaxBackoff, so a missing Role does not flood the API server.
//
//	u, err := podcost.New(podcost.Config{Pod: os.Getenv("POD_NAME"), Logger: log}, func() int {
//		return leadingQueues(node) // how many queues this process leads now
//	})
//	// Call u.Changed() from the Node's OnStartedLeading and OnStoppedLeading; Start and Stop with the app.
package podcost
