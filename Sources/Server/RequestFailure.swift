/// A request that cannot be served as asked, carrying the reply that says why (a 4xx
/// with its code, message and field). Handler helpers throw it; `ServerContext.failure`
/// turns it back into its reply, so a bad input is never reported as a 500.
struct RequestFailure: Error {
    let response: HTTPResponse

    init(_ response: HTTPResponse) { self.response = response }

    init(_ status: Int, _ code: String, _ message: String, field: String? = nil) {
        response = .error(status, code, message, field: field)
    }
}
