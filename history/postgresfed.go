package history

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const upsertFederated = `
INSERT INTO peloton_archived_federated (federation, kind, id, create_ns, finish_ns, labels, archived_at, record)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (federation, kind, id) DO UPDATE SET
	create_ns = EXCLUDED.create_ns, finish_ns = EXCLUDED.finish_ns, labels = EXCLUDED.labels,
	archived_at = EXCLUDED.archived_at, record = EXCLUDED.record`

// PutFederated archives objects in one transaction.
func (p *Postgres) PutFederated(ctx context.Context, objs ...*Federated) error {
	if err := checkFederated(objs); err != nil {
		return err
	}
	if len(objs) == 0 {
		return nil
	}
	enc, err := encodeAllFederated(objs)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	for i, e := range enc {
		o := objs[i]
		labels := o.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		var finish *int64
		if !o.FinishTime.IsZero() {
			ns := timeNanos(o.FinishTime)
			finish = &ns
		}
		var archived *time.Time
		if !o.ArchiveTime.IsZero() {
			archived = &o.ArchiveTime
		}
		b.Queue(upsertFederated, e.federation, int16(e.kind), e.id, e.createNanos, finish, labels, archived, e.record)
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	return p.fail(ctx, fedPutOp(objs), err)
}

// GetFederated returns one archived object.
func (p *Postgres) GetFederated(ctx context.Context, federation string, kind Kind, id string) (*Federated, error) {
	if err := checkFedKey(federation, kind, id); err != nil {
		return nil, err
	}
	var rec []byte
	err := p.pool.QueryRow(ctx, `SELECT record FROM peloton_archived_federated WHERE federation = $1 AND kind = $2 AND id = $3`,
		federation, int16(kind), id).Scan(&rec)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fedNotFound(federation, kind, id)
	}
	if err != nil {
		return nil, p.fail(ctx, fedOp("get", federation, kind, id), err)
	}
	o, err := decodeFederated(rec)
	if err != nil {
		return nil, fmt.Errorf("history: %s %s of federation %s: %w", kind, id, federation, err)
	}
	return o, nil
}

// DeleteFederated removes one archived object.
func (p *Postgres) DeleteFederated(ctx context.Context, federation string, kind Kind, id string) error {
	if err := checkFedKey(federation, kind, id); err != nil {
		return err
	}
	tag, err := p.pool.Exec(ctx, `DELETE FROM peloton_archived_federated WHERE federation = $1 AND kind = $2 AND id = $3`,
		federation, int16(kind), id)
	if err != nil {
		return p.fail(ctx, fedOp("delete", federation, kind, id), err)
	}
	if tag.RowsAffected() == 0 {
		return fedNotFound(federation, kind, id)
	}
	return nil
}

// ListFederated returns one page of the objects f selects, newest first,
// in the order of the by_time index.
func (p *Postgres) ListFederated(ctx context.Context, f FederatedFilter, pageSize uint32, pageToken string) ([]*Federated, string, error) {
	n, err := checkFedFilter(f, pageSize)
	if err != nil {
		return nil, "", err
	}
	after, hasAfter, err := parseToken(pageToken)
	if err != nil {
		return nil, "", err
	}
	var sql strings.Builder
	args := []any{f.Federation, int16(f.Kind)}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	sql.WriteString(`SELECT create_ns, record FROM peloton_archived_federated WHERE federation = $1 AND kind = $2`)
	if len(f.Labels) > 0 {
		sql.WriteString(` AND labels @> ` + arg(f.Labels) + `::jsonb`)
	}
	if !f.CreatedSince.IsZero() {
		sql.WriteString(` AND create_ns >= ` + arg(timeNanos(f.CreatedSince)))
	}
	if !f.CreatedUntil.IsZero() {
		sql.WriteString(` AND create_ns < ` + arg(timeNanos(f.CreatedUntil)))
	}
	if hasAfter {
		t, id := arg(after.createNanos), arg(after.id)
		sql.WriteString(` AND create_ns <= ` + t + ` AND (create_ns < ` + t + ` OR id > ` + id + `)`)
	}
	sql.WriteString(` ORDER BY create_ns DESC, id LIMIT ` + arg(n+1))
	op := fmt.Sprintf("list %ss of federation %s", f.Kind, f.Federation)
	rows, err := p.pool.Query(ctx, sql.String(), args...)
	if err != nil {
		return nil, "", p.fail(ctx, op, err)
	}
	defer rows.Close()
	var out []*Federated
	var next string
	var lastNanos int64
	bytesOut := 0
	for rows.Next() {
		var ns int64
		var rec []byte
		if err := rows.Scan(&ns, &rec); err != nil {
			return nil, "", p.fail(ctx, op, err)
		}
		if len(out) == n || (len(out) > 0 && bytesOut+len(rec) > pageBytes) {
			next = cursor{createNanos: lastNanos, id: out[len(out)-1].ID}.token()
			break
		}
		o, err := decodeFederated(rec)
		if err != nil {
			return nil, "", fmt.Errorf("history: an archived %s of federation %s: %w", f.Kind, f.Federation, err)
		}
		out = append(out, o)
		lastNanos = ns
		bytesOut += len(rec)
	}
	if err := rows.Err(); err != nil {
		return nil, "", p.fail(ctx, op, err)
	}
	return out, next, nil
}
