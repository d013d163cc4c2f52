package node

import (
	"context"
	"time"

	pb "github.com/counterd/counterd/api/counterd/cluster/v1"
)

// Conversions of the Lease call (lease.go), beside wire.go's.

func (s peerServer) Lease(ctx context.Context, p *pb.LeaseRequest) (*pb.LeaseResponse, error) {
	return serve(s.n, ctx, func(d *decoder) leaseRequest { return d.leaseRequest(p) }, (*Node).serveLease,
		func(e *wireError) *leaseResponse { return &leaseResponse{Err: e} }, pbLeaseResponse)
}

func pbLeaseRequest(r *leaseRequest) *pb.LeaseRequest {
	return &pb.LeaseRequest{Header: pbHeader(&r.header)}
}

func (d *decoder) leaseRequest(p *pb.LeaseRequest) leaseRequest {
	return leaseRequest{header: goHeader(p.GetHeader())}
}

func pbLeaseResponse(r *leaseResponse) *pb.LeaseResponse {
	return &pb.LeaseResponse{Granted: r.Granted, Nodes: r.Nodes, WaitNanos: int64(r.Wait), Err: pbError(r.Err)}
}

func (d *decoder) leaseResponse(p *pb.LeaseResponse) leaseResponse {
	return leaseResponse{Granted: p.GetGranted(), Nodes: p.GetNodes(), Wait: time.Duration(p.GetWaitNanos()), Err: goError(p.GetErr())}
}
