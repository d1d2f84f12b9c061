// vulkan_probe.exe: the Vulkan devices a Windows program sees (docs/windows.md: under Wine, lavapipe
// through Wine's vulkan-1.dll, which needs an X server: xvfb-run). Cross-built with
//   x86_64-w64-mingw32-gcc-posix -I build/vulkan-headers/usr/include scripts/windows/vulkan_probe.c -o vulkan_probe.exe
#include <windows.h>

#include <stdio.h>

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

int main(void) {
    HMODULE vk = LoadLibraryA("vulkan-1.dll");
    if (!vk) {
        printf("no vulkan-1.dll\n");
        return 1;
    }
    PFN_vkGetInstanceProcAddr get = (PFN_vkGetInstanceProcAddr) (void *) GetProcAddress(vk, "vkGetInstanceProcAddr");
    PFN_vkCreateInstance create = (PFN_vkCreateInstance) get(NULL, "vkCreateInstance");
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "probe", 1, NULL, 0, VK_API_VERSION_1_2};
    VkInstanceCreateInfo info = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app, 0, NULL, 0, NULL};
    VkInstance instance;
    VkResult r = create(&info, NULL, &instance);
    if (r != VK_SUCCESS) {
        printf("vkCreateInstance: %d\n", r);
        return 1;
    }
    PFN_vkEnumeratePhysicalDevices list = (PFN_vkEnumeratePhysicalDevices) get(instance, "vkEnumeratePhysicalDevices");
    PFN_vkGetPhysicalDeviceProperties describe =
        (PFN_vkGetPhysicalDeviceProperties) get(instance, "vkGetPhysicalDeviceProperties");
    VkPhysicalDevice devices[8];
    uint32_t n = 8;
    list(instance, &n, devices);
    printf("devices: %u\n", n);
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceProperties p;
        describe(devices[i], &p);
        printf("  %s (API %u.%u)\n", p.deviceName, VK_VERSION_MAJOR(p.apiVersion), VK_VERSION_MINOR(p.apiVersion));
    }
    return 0;
}
