"""A multi-node Ray cluster on this machine for the chaos tests, run as its own process (it must
not share the test session's Ray): a head without CPUs and worker nodes, each a separate raylet
with its own resources and object store, as Ray's own tests build them (``ray.cluster_utils``).

Arguments: CPUs per worker node (2), worker nodes (2), CPUs of the head (0). Prints one JSON line
``{"address": ..., "nodes": {raylet_pid: node_id}}`` when up, then reads commands on stdin, one per line, answering each with such a line:
``kill PID`` (the node whose raylet has that pid dies at once, its workers with it),
``add`` (one more worker node), ``quit``.
"""
import json
import sys


def main() -> None:
    from ray.cluster_utils import Cluster
    cpus = float(sys.argv[1]) if len(sys.argv) > 1 else 2
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    head_cpus = float(sys.argv[3]) if len(sys.argv) > 3 else 0
    node_args = {"num_cpus": cpus, "object_store_memory": 150 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": head_cpus, "object_store_memory": 150 * 2**20, "include_dashboard": False})
    nodes = [cluster.add_node(**node_args) for _ in range(n)]
    cluster.wait_for_nodes()

    def say(**extra):
        live = {str(node.all_processes["raylet"][0].process.pid): node.node_id for node in nodes}
        print(json.dumps({"address": cluster.address, "nodes": live, **extra}), flush=True)

    say()
    do = _commands(cluster, nodes, node_args, say)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        try:
            if not do(cmd):
                break
        except Exception as exc:  # noqa: BLE001 - said to the test, which fails with it
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
    cluster.shutdown()


def _commands(cluster, nodes, node_args, say):
    def do(cmd) -> bool:
        if cmd[0] == "kill":
            node = next(x for x in nodes if str(x.all_processes["raylet"][0].process.pid) == cmd[1])
            cluster.remove_node(node, allow_graceful=False)
            nodes.remove(node)
            say(killed=node.node_id)
        elif cmd[0] == "add":
            nodes.append(cluster.add_node(**node_args))
            cluster.wait_for_nodes()
            say(added=nodes[-1].node_id)
        elif cmd[0] == "quit":
            return False
        else:
            raise ValueError(f"unknown command {cmd[0]!r}")
        return True
    return do


if __name__ == "__main__":
    main()
