//! Label and field selectors, parsed and matched as kube-apiserver does.
