package podcost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// APIError is a request the API server answered with an error status.
type APIError struct {
	Method     string
	StatusCode int
	// Reason and Message are the API server's (its Status object), when it sent one.
	Reason, Message string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("podcost: %s of the pod: %d %s", e.Method, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Forbidden reports whether the service account may not do the request (a missing Role or binding).
func (e *APIError) Forbidden() bool { return e.StatusCode == http.StatusForbidden }

// write brings the pod's cost to want: it reads the pod's cost first while *known is not known, then
// patches the annotation unless it already says want. *known follows what the pod carries.
func (u *Updater) write(ctx context.Context, want int, known *int) error {
	if *known < 0 {
		cur, err := u.get(ctx)
		if err != nil {
			return err
		}
		*known = cur
		if cur == want {
			return nil
		}
	}
	if err := u.patch(ctx, want); err != nil {
		return err
	}
	*known = want
	u.cfg.Logger.Debug("pod-deletion-cost written", u.fields(zap.Int("cost", want))...)
	return nil
}

type podMeta struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// get returns the pod's current cost; an absent annotation is 0, as the controller reads it, and so
// is one that is not a number (the next patch replaces it).
func (u *Updater) get(ctx context.Context) (int, error) {
	body, err := u.do(ctx, http.MethodGet, "", nil)
	if err != nil {
		return 0, err
	}
	var pod podMeta
	if err := json.Unmarshal(body, &pod); err != nil {
		return 0, fmt.Errorf("podcost: GET of the pod: %w", err)
	}
	n, err := strconv.Atoi(pod.Metadata.Annotations[Annotation])
	if err != nil {
		return 0, nil
	}
	return n, nil
}

// patch sets the annotation with a JSON merge patch, which changes that one key.
func (u *Updater) patch(ctx context.Context, cost int) error {
	var p podMeta
	p.Metadata.Annotations = map[string]string{Annotation: strconv.Itoa(cost)}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = u.do(ctx, http.MethodPatch, "application/merge-patch+json", b)
	return err
}

// do sends one request about the pod, with the token read afresh, and returns the body of a 2xx answer.
func (u *Updater) do(ctx context.Context, method, contentType string, body []byte) ([]byte, error) {
	token, err := os.ReadFile(filepath.Join(u.cfg.ServiceAccountDir, tokenFile))
	if err != nil {
		return nil, fmt.Errorf("podcost: service-account token: %w", err)
	}
	target := u.api + "/api/v1/namespaces/" + url.PathEscape(u.cfg.Namespace) + "/pods/" + url.PathEscape(u.cfg.Pod)
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("podcost: %s of the pod: %w", method, err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := u.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("podcost: %s of the pod: %w", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("podcost: %s of the pod: %w", method, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Method: method, StatusCode: resp.StatusCode}
		var status struct{ Reason, Message string }
		if json.Unmarshal(b, &status) == nil {
			e.Reason, e.Message = status.Reason, status.Message
		}
		return nil, e
	}
	return b, nil
}

// failure is what identifies a failure for logging it once: the same failure again is not logged.
type failure struct {
	method string
	status int // 0: not an answer of the API server (a network error, a token that cannot be read)
}

// report logs err unless it is the failure last logged, and returns the failure to remember.
func (u *Updater) report(err error, last failure) failure {
	f := failure{method: "request"}
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		f = failure{method: apiErr.Method, status: apiErr.StatusCode}
	}
	if f == last {
		u.cfg.Logger.Debug("pod-deletion-cost still not written", u.fields(zap.Error(err))...)
		return f
	}
	msg := "pod-deletion-cost not written; scale-in will not prefer followers until it is (retried with backoff)"
	if apiErr != nil && apiErr.Forbidden() {
		msg = "pod-deletion-cost not written: the pod's service account may not get and patch its pod " +
			"(deploy/kubernetes/components/pod-deletion-cost grants it); scale-in will not prefer followers until it may (retried with backoff)"
	}
	u.cfg.Logger.Warn(msg, u.fields(zap.Error(err))...)
	return f
}

// recovered logs that writes succeed again after a logged failure, and forgets it.
func (u *Updater) recovered(cost int, last failure) failure {
	if last != (failure{}) {
		u.cfg.Logger.Info("pod-deletion-cost written again", u.fields(zap.Int("cost", cost))...)
	}
	return failure{}
}

func (u *Updater) fields(more ...zap.Field) []zap.Field {
	return append([]zap.Field{zap.String("namespace", u.cfg.Namespace), zap.String("pod", u.cfg.Pod)}, more...)
}
