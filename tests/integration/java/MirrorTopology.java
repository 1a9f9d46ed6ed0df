// MM2's own client reading a cluster's heartbeat topics: prints "UPSTREAM <alias> <hops>" per
// upstream cluster. Run: java -cp '<kafka jars>/*' MirrorTopology.java BOOTSTRAP
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class MirrorTopology {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        for (String alias : RemoteClusterUtils.upstreamClusters(props)) {
            System.out.println("UPSTREAM " + alias + " "
                + RemoteClusterUtils.replicationHops(props, alias));
        }
    }
}
