package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MethodJobToken: a job's own token (JobToken), which the daemon gives
// the runs of a self-scaling job; the principal is JobPrincipalPrefix and
// the job's id.
const MethodJobToken = "job-token"

// JobPrincipalPrefix starts the principal of a job token's holder.
const JobPrincipalPrefix = "job:"

// jobTokenPrefix starts every job token, so the guard tells one from a
// token of the token file without a lookup.
const jobTokenPrefix = "pjt1."

// JobTokens mints and checks jobs' own tokens: "pjt1.<job id, base64url>.
// <HMAC-SHA256 of the id under the daemon's key, hex>". Live says whether
// the job may still use its token (it exists and has not ended): a token
// is revoked when its job ends, since the key is never rotated under a
// running job.
type JobTokens struct {
	Key  []byte
	Live func(ctx context.Context, jobID string) error
}

// Mint returns job's token.
func (t *JobTokens) Mint(jobID string) string {
	return jobTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(jobID)) + "." + hex.EncodeToString(t.mac(jobID))
}

func (t *JobTokens) mac(jobID string) []byte {
	h := hmac.New(sha256.New, t.Key)
	h.Write([]byte("peloton job token\x00" + jobID))
	return h.Sum(nil)
}

// isJobToken says whether tok is shaped as a job token.
func isJobToken(tok string) bool { return strings.HasPrefix(tok, jobTokenPrefix) }

// verify returns the identity of a job token's holder, or Unauthenticated
// saying why the token does not hold.
func (t *JobTokens) verify(ctx context.Context, tok, peer string) (Identity, error) {
	bad := status.Error(codes.Unauthenticated, "the job token is not valid")
	enc, sum, ok := strings.Cut(strings.TrimPrefix(tok, jobTokenPrefix), ".")
	if !ok {
		return Identity{Peer: peer}, bad
	}
	id, err1 := base64.RawURLEncoding.DecodeString(enc)
	mac, err2 := hex.DecodeString(sum)
	if err1 != nil || err2 != nil || len(id) == 0 || !hmac.Equal(mac, t.mac(string(id))) {
		return Identity{Peer: peer}, bad
	}
	if err := t.Live(ctx, string(id)); err != nil {
		return Identity{Peer: peer}, status.Errorf(codes.Unauthenticated, "the job token of job %s is revoked: %v", id, err)
	}
	return Identity{Principal: JobPrincipalPrefix + string(id), Method: MethodJobToken, Peer: peer}, nil
}

// jobTokenIdentity identifies a bearer job token when the guard has job
// tokens: handled says whether tok was one.
func (g *Guard) jobTokenIdentity(ctx context.Context, v []string, peer string) (id Identity, handled bool, err error) {
	if g.jobTokens == nil || len(v) == 0 {
		return Identity{}, false, nil
	}
	tok, ok := bearerToken(v)
	if !ok || !isJobToken(tok) {
		return Identity{}, false, nil
	}
	id, err = g.jobTokens.verify(ctx, tok, peer)
	return id, true, err
}

// authorizeJobToken lets a job token's holder call only the methods whose
// rule says JobToken, on its own job.
func authorizeJobToken(c *call, req any) error {
	short := shortMethod(c.method)
	own := strings.TrimPrefix(c.id.Principal, JobPrincipalPrefix)
	if !c.rule.JobToken {
		return status.Errorf(codes.PermissionDenied, "a job token may call only GetJob, ScaleJob and CancelJob of its own job, not %s", short)
	}
	r, ok := req.(interface{ GetJobId() string })
	if !ok || r.GetJobId() != own {
		target := ""
		if ok {
			target = r.GetJobId()
		}
		return status.Errorf(codes.PermissionDenied, "the job token of job %s may not call %s on job %q: only on its own job", own, short, target)
	}
	return nil
}
