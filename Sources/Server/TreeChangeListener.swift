/// Told after every committed change of the workspace tree (a put, a delete, a restore;
/// not a purge, which changes no version): the seam where requests held by
/// `GET /v1/tree?wait=` are woken (TreeHandlers.pageOrHold). Called on the thread that
/// committed, after the commit; it must not block.
protocol TreeChangeListener: Sendable {
    func treeChanged()
}

/// Requests held on the tree's feed are woken by the process's notifier.
extension ChangeNotifier: TreeChangeListener {
    func treeChanged() { changed(.tree) }
}
