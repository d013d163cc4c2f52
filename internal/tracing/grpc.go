package tracing

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// mdGetter looks a key up in incoming gRPC metadata.
func mdGetter(md metadata.MD) func(string) string {
	return func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// serverContext starts the server span of a call to method, child of
// the trace context in the call's metadata.
func (t *Tracer) serverContext(ctx context.Context, method string) (context.Context, *Span) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = ContextWithRemote(ctx, Extract(mdGetter(md)))
	}
	ctx, span := t.Start(ctx, method, KindServer)
	span.SetString("rpc.system", "grpc")
	return ctx, span
}

// endRPC records err's gRPC status on span and ends it.
func endRPC(span *Span, err error) {
	if span.Recording() {
		code := status.Code(err)
		span.SetInt("rpc.grpc.status_code", int64(code))
		if err != nil {
			span.Fail(code.String() + ": " + status.Convert(err).Message())
		}
	}
	span.End()
}

// ServerOptions are the gRPC server options that trace every call;
// none on a nil *Tracer. A call to a method for which parentOnly (if set)
// is true is traced only when it carries a trace context.
func ServerOptions(t *Tracer, parentOnly func(method string) bool) []grpc.ServerOption {
	if t == nil {
		return nil
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if parentOnly != nil && parentOnly(info.FullMethod) && !hasParent(ctx) {
			return h(ctx, req)
		}
		ctx, span := t.serverContext(ctx, info.FullMethod)
		resp, err := h(ctx, req)
		endRPC(span, err)
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if parentOnly != nil && parentOnly(info.FullMethod) && !hasParent(ss.Context()) {
			return h(srv, ss)
		}
		ctx, span := t.serverContext(ss.Context(), info.FullMethod)
		err := h(srv, &tracedStream{ServerStream: ss, ctx: ctx})
		endRPC(span, err)
		return err
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream)}
}

// hasParent reports whether an incoming call carries a traceparent.
func hasParent(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(TraceparentHeader)) > 0
}

type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tracedStream) Context() context.Context { return s.ctx }

// clientContext starts the client span of a call to method and puts its
// trace context in the outgoing metadata.
func (t *Tracer) clientContext(ctx context.Context, method string) (context.Context, *Span) {
	ctx, span := t.Start(ctx, method, KindClient)
	span.SetString("rpc.system", "grpc")
	sc := span.Context()
	kv := []string{TraceparentHeader, sc.Traceparent()}
	if sc.State != "" {
		kv = append(kv, TracestateHeader, sc.State)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...), span
}

// DialOptions are the gRPC client options that trace the calls made
// within a trace (a context carrying a span) and pass the trace on to the
// server; none on a nil *Tracer. Calls outside any trace (background
// traffic) are not traced.
func DialOptions(t *Tracer) []grpc.DialOption {
	if t == nil {
		return nil
	}
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !FromContext(ctx).Valid() {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		ctx, span := t.clientContext(ctx, method)
		err := invoker(ctx, method, req, reply, cc, opts...)
		endRPC(span, err)
		return err
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		// The span covers opening the stream: its messages may flow long
		// after (a streamed transfer ends it when it is set up).
		if !FromContext(ctx).Valid() {
			return streamer(ctx, desc, cc, method, opts...)
		}
		ctx, span := t.clientContext(ctx, method)
		cs, err := streamer(ctx, desc, cc, method, opts...)
		endRPC(span, err)
		return cs, err
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)}
}
