import Protocol

/// Request bodies the server decodes refuse fields the OpenAPI document does not
/// declare (`additionalProperties: false`): a misspelt field is a bug to report (400
/// naming it), not to skip. Checked here, on the way in, and not in the shared wire
/// types' decoders, because the client decodes the same types from replies and must
/// keep accepting fields a newer server adds.
protocol DeclaredFields: Decodable {
    /// The top-level fields the document declares for this body.
    static var declaredFields: [String] { get }
}

/// Decodes `T` after refusing any field `T.declaredFields` lacks.
struct Declared<T: DeclaredFields>: Decodable {
    let value: T

    init(from decoder: any Decoder) throws {
        try WireJSON.refuseUnknownFields(decoder, known: T.declaredFields)
        value = try T(from: decoder)
    }
}

extension PresentRequest: DeclaredFields {
    static var declaredFields: [String] { ["hashes"] }
}

extension BlockPackRequest: DeclaredFields {
    static var declaredFields: [String] { ["hashes"] }
}

extension FileRecord: DeclaredFields {
    /// `device`, `sequence` and `recordedAt` are the server's (readOnly): known, and ignored in a request.
    static var declaredFields: [String] { ["path", "hash", "size", "blocks", "captureDate", "mtime", "deviceSequence", "device", "sequence", "recordedAt"] }
}

extension Watermark: DeclaredFields {
    static var declaredFields: [String] { ["sequence", "newestCaptureDate"] }
}
