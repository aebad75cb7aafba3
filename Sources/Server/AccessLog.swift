#if canImport(Glibc)
import Glibc
#endif

/// One line per request on stderr (journald under systemd), written once the reply is
/// sent (or the request otherwise ends), in `key=value` pairs (logfmt):
///
///     access method=GET route=/v1/blocks/{hash} status=200 in=0 out=4194304 ms=3.214 device=phone client=192.0.2.7 end=sent
///
/// `route` is the path's pattern, never the path: no hash, upload id or (presigned URLs)
/// signature reaches the log. `in`/`out` are body bytes (`out` as queued: a HEAD's is 0);
/// `ms` runs from the header's arrival to the end; `device` is `-` when the request was
/// not authenticated by a device token; `end` says how it ended (FinishedRequest.End).
/// A connection closed by the header deadline has `method=- route=- status=0`. The keys
/// and their order are stable; Docs/operations.md, "Access log", is the reference.
/// Each line is one `write(2)`, so lines from several threads never interleave.
struct AccessLog: RequestObserver {
    func finished(_ r: FinishedRequest) {
        var line = "access method="
        line.reserveCapacity(160)
        line += r.method.map(Self.value) ?? "-"
        line += " route="
        line += r.route?.text ?? "-"
        line += " status=\(r.status) in=\(r.bytesIn) out=\(r.bytesOut) ms="
        line += Self.milliseconds(r.microseconds)
        line += " device="
        line += r.device.map(Self.value) ?? "-"
        line += " client="
        line += r.client.text
        line += " end="
        line += r.end.rawValue
        line += "\n"
        line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    }

    /// `µs` as milliseconds with three decimals, without Foundation's formatter.
    static func milliseconds(_ microseconds: Int64) -> String {
        let us = max(0, microseconds)
        let fraction = String(us % 1000)
        return "\(us / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
    }

    /// A value as logfmt wants it: bare when it has no space, quote, `=` or control
    /// character, else quoted with `"` and `\` escaped (a method is whatever a client sent).
    static func value(_ text: String) -> String {
        let plain = !text.isEmpty && text.utf8.allSatisfy { $0 > 0x20 && $0 != 0x22 && $0 != 0x3D && $0 != 0x5C && $0 != 0x7F }
        if plain { return text }
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F: out += "\\u{\(String(scalar.value, radix: 16))}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// Where the access log goes (`vdrive serve --access-log`).
public enum AccessLogMode: String, Sendable, CaseIterable {
    case off, stderr
}

/// Several observers told in turn.
struct RequestObservers: RequestObserver {
    let all: [any RequestObserver]
    func finished(_ request: FinishedRequest) { for observer in all { observer.finished(request) } }
}
