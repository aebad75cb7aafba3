import Crypto
import ObjectStore
import Testing
import TestTraits

/// Signature Version 4 against the examples AWS documents for S3 ("Signature
/// Calculations for the Authorization Header" and "Authenticating Requests: Using Query
/// Parameters"): the same key pair, date, region and requests, the published signatures.
@Suite(.tags(.logic)) struct SigV4Tests {
    static let credentials = S3Credentials(accessKey: "AKIAIOSFODNN7EXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    static let date = "20130524T000000Z"
    static let emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    @Test func derivedSigningKeyOfTheGeneralExample() {
        // AWS General Reference, "Examples of how to derive a signing key for Signature Version 4".
        let key = SigV4.signingKey(secret: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", day: "20120215", region: "us-east-1", service: "iam")
        #expect(Hex.encode(key) == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d")
    }

    @Test func getObjectWithRange() {
        let request = SigV4.Request(method: "GET", path: "/test.txt",
                                    headers: [("Host", "examplebucket.s3.amazonaws.com"), ("Range", "bytes=0-9"),
                                              ("x-amz-content-sha256", Self.emptyHash), ("x-amz-date", Self.date)],
                                    payloadHash: Self.emptyHash)
        #expect(request.canonical == """
            GET
            /test.txt

            host:examplebucket.s3.amazonaws.com
            range:bytes=0-9
            x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            x-amz-date:20130524T000000Z

            host;range;x-amz-content-sha256;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        #expect(SigV4.authorization(request, amzDate: Self.date, region: "us-east-1", credentials: Self.credentials)
            == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test func putObjectWithSignedPayload() {
        let body = "Welcome to Amazon S3."
        let payload = SHA256Hasher.digest(body).hex
        #expect(payload == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let request = SigV4.Request(method: "PUT", path: "/test$file.text",
                                    headers: [("Host", "examplebucket.s3.amazonaws.com"), ("Date", "Fri, 24 May 2013 00:00:00 GMT"),
                                              ("x-amz-date", Self.date), ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
                                              ("x-amz-content-sha256", payload)],
                                    payloadHash: payload)
        #expect(SigV4.signature(request, amzDate: Self.date, region: "us-east-1", service: "s3", secret: Self.credentials.secretKey)
            == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
    }

    @Test func listObjectsWithQuery() {
        let request = SigV4.Request(method: "GET", path: "/", query: [("max-keys", "2"), ("prefix", "J")],
                                    headers: [("Host", "examplebucket.s3.amazonaws.com"), ("x-amz-date", Self.date),
                                              ("x-amz-content-sha256", Self.emptyHash)],
                                    payloadHash: Self.emptyHash)
        #expect(SigV4.signature(request, amzDate: Self.date, region: "us-east-1", service: "s3", secret: Self.credentials.secretKey)
            == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    @Test func presignedGet() {
        let request = SigV4.Request(method: "GET", path: "/test.txt", headers: [("host", "examplebucket.s3.amazonaws.com")],
                                    payloadHash: SigV4.unsignedPayload)
        let query = SigV4.presignQuery(request, amzDate: Self.date, expires: 86400, region: "us-east-1", credentials: Self.credentials)
        #expect(SigV4.queryString(query) == "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404")
    }

    @Test func encodingKeepsUnreservedAndSlashesOnlyInPaths() {
        #expect(SigV4.encode("a b/c~d+é", keepSlash: true) == "a%20b/c~d%2B%C3%A9")
        #expect(SigV4.encode("a/b", keepSlash: false) == "a%2Fb")
        #expect(SigV4.amzDate(1369353600) == "20130524T000000Z")
    }

    @Test func storeURLParsing() throws {
        let location = try S3Location.parse("s3://vdrive-blocks?endpoint=http://127.0.0.1:8333/&region=eu-west-1&credentials=/etc/vdrive/s3")
        #expect(location == S3Location(bucket: "vdrive-blocks", endpoint: "http://127.0.0.1:8333", region: "eu-west-1", credentialsFile: "/etc/vdrive/s3"))
        #expect(location.host == "127.0.0.1:8333")
        #expect(try S3Location.parse("s3://b12?endpoint=https://s3.example").region == "us-east-1")
        #expect(throws: S3Location.ParseError.self) { try S3Location.parse("s3://Bad_Bucket?endpoint=http://h:1") }
        #expect(throws: S3Location.ParseError.self) { try S3Location.parse("s3://bucket") }
        #expect(throws: S3Location.ParseError.self) { try S3Location.parse("s3://bucket?endpoint=http://h:1&colour=red") }
        #expect(throws: S3Location.ParseError.self) { try location.credentials(environment: [:]) == S3Credentials(accessKey: "", secretKey: "") }
        let fromEnvironment = try S3Location.parse("s3://bucket?endpoint=http://h:1").credentials(environment: ["AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"])
        #expect(fromEnvironment == S3Credentials(accessKey: "a", secretKey: "s"))
    }
}
