package node

// ServiceName is the gRPC service of peer traffic. Servers authenticate it
// as cluster traffic (mTLS), never with client tokens.
const ServiceName = serviceName
