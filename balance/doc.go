// Package balance spreads the leadership of many queues over the workers that campaign for them,
// without touching what makes an election safe.
//
// An etcd election is first come, first served: the worker that starts first, or that survives a
// rolling restart longest, would lead every queue. A Runner campaigns for a worker's queues and decides
// only whether and when the worker stands as a candidate; who wins among the candidates is still
// etcd's decision, and a term is still a term (fenced, ended on any doubt).
//
// The mechanism, from one watch on the project's election keys:
//
//   - Fair share is ceil(queues / workers), where workers counts the distinct server IDs among the
//     candidates of this worker's queues (every live worker is a candidate somewhere).
//   - Deferral: a worker that leads its fair share or more does not stand in line for other queues,
//     and withdraws its candidacy where it stands in line, so queues go to workers below their share.
//   - Shedding: a worker that leads more than ShedAbove × fair share resigns terms, one every
//     ShedInterval, but only of queues where another worker stands as candidate: each resignation is a
//     graceful handover to it.
//   - Always an owner: a queue with no other candidate is always campaigned for, whatever the share,
//     and is never shed or withdrawn from. The gap between fair share (deferral) and ShedAbove × fair
//     share (shedding) keeps a queue from being passed back and forth.
//
// A worker alone leads everything; as others join, the leaders above ShedAbove × fair share hand queues
// over until none is. With the default ShedAbove 1.25, no worker leads more than 1.25 × its fair share
// (plus one) once shedding settles.
package balance
